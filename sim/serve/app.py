"""The HTTP side of ``sim serve``: vLLM's OpenAI-compatible routes on aiohttp.

``/v1/completions`` and ``/v1/chat/completions`` (server-sent events when ``stream``, one JSON
answer otherwise), ``/v1/models``, ``/health``, ``/version`` and ``/metrics``. Each request is
parsed (sim/serve/prompts.py), stamped with its simulated arrival, routed to a replica
(kvsim's router, sim/engine/cluster/router.py, when there are several) and written out as
its engine's tokens come due (sim/serve/engine.py). A refused request gets vLLM's JSON
error: 400 for a bad body or a prompt that can never fit, 503 when the engine or the
queue limit turns it away, 404 for another model's name. A client that goes away aborts
its request (the handler is cancelled). While draining, new requests get 503.
"""

from __future__ import annotations

import json
import time
import uuid

from aiohttp import web

from sim.request import Request
from sim.serve.metrics import render
from sim.serve.prompts import BadRequest, parse_ask

FILLER = (" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", ".")
#: engine rejections that no retry can cure: 400, as vLLM answers them; the rest are 503
_PERMANENT = {"prompt_too_long": 400, "exceeds_kv_pool": 400}


def _error(status: int, message: str, kind: str, param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status},
            "object": "error", "message": message, "type": kind, "code": status}
    return web.json_response(body, status=status)


def _filler(n: int) -> str:
    return "".join(FILLER[i % len(FILLER)] for i in range(n))


class Server:
    """The served engines, their shared clock and router, and the routes."""

    def __init__(self, engines: list, clock, router, model_name: str, max_model_len: int,
                 tokenizer=None) -> None:
        self.engines, self.clock, self.router = engines, clock, router
        self.model_name, self.max_model_len = model_name, max_model_len
        self.tokenizer = tokenizer  # None: prompts' tokens estimated from their text
        self.draining = False
        self.active = 0  # handlers in progress

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.models),
            web.get("/health", self.health),
            web.get("/version", self.version),
            web.get("/metrics", self.metrics),
        ])
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=503 if self.draining else 200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "kvsim-sim-serve"})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": int(time.time()), "owned_by": "kvsim",
            "root": self.model_name, "parent": None, "max_model_len": self.max_model_len}]})

    async def metrics(self, request: web.Request) -> web.Response:
        text = render(self.engines, self.model_name, self.clock.now())
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        if self.draining:
            return _error(503, "the server is shutting down", "ServiceUnavailableError")
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return _error(400, "the request body is not valid JSON", "BadRequestError")
        # It arrives now, its body read: from here to submit nothing awaits, so requests
        # reach the engine in the order of their arrival times.
        arrived = self.clock.now()
        try:
            ask = parse_ask(body, chat, self.max_model_len, self.tokenizer)
        except BadRequest as e:
            return _error(e.status, str(e), "BadRequestError", e.param)
        if ask.model and ask.model != self.model_name:
            return _error(404, f"The model `{ask.model}` does not exist (this server serves "
                               f"`{self.model_name}`).", "NotFoundError", "model")
        req = Request(0, arrived, ask.segments, ask.max_tokens, ask.max_tokens)
        engine = self.engines[self.router.pick(req, arrived)] if self.router is not None else self.engines[0]
        ticket = engine.submit(req)
        self.active += 1
        try:
            return await self._answer(request, ask, ticket, engine)
        finally:  # (a cancelled handler: the client went away)
            self.active -= 1
            engine.abort(ticket)  # nothing if it is done

    async def _answer(self, request: web.Request, ask, ticket, engine) -> web.StreamResponse:
        kind, value = await ticket.next()
        if kind == "rejected":
            status = _PERMANENT.get(value, 503)
            return _error(status, f"the simulated engine refused the request: {value}",
                          "BadRequestError" if status == 400 else "ServiceUnavailableError", value)
        # the id names the engine and its request (the row of requests.csv), then is unique
        rid = f"{'chatcmpl' if ask.chat else 'cmpl'}-{engine.name}-{ticket.req.request_id}-{uuid.uuid4().hex[:16]}"
        created = int(time.time())
        if not ask.stream:
            while kind != "done":
                kind, value = await ticket.next()
            await self.clock.until(value)
            return web.json_response(self._whole(ask, rid, created, ticket.req.num_generated))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            await self._stream(resp, ask, ticket, engine, rid, created, value)
        except ConnectionResetError:  # the client went away mid-write: the caller aborts its request
            pass
        return resp

    async def _stream(self, resp: web.StreamResponse, ask, ticket, engine, rid: str, created: int,
                      value: float) -> None:
        """Write the tokens as they come due, from the first (due at ``value``)."""
        kind = "token"
        obj = "chat.completion.chunk" if ask.chat else "text_completion"
        head = self._head(rid, obj, created)
        middle = _CHAT_MIDDLE if ask.chat else _TEXT_MIDDLE
        n, stats, events = 0, engine.stats, ticket.events
        while kind != "done":
            due = value
            await self.clock.until(due)
            out = []
            while True:  # this token, and any others already due (a loop that fell behind)
                n += 1
                if 1 < n < ask.max_tokens:
                    out.append(head + middle[(n - 1) % len(FILLER)])
                else:
                    out.append(head + self._choice(ask.chat, n, n == ask.max_tokens))
                kind, value = events.popleft() if events else (None, None)
                if kind != "token" or value > self.clock.now():
                    break
            await resp.write(b"".join(out))
            if n == len(out):  # the first token went out
                stats.first_written(self.clock.now() - due)
            if kind is None:
                kind, value = await ticket.next()
        if ask.include_usage:
            await self._event(resp, {"id": rid, "object": obj, "created": created, "model": self.model_name,
                                     "choices": [], "usage": self._usage(ask, n)})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()

    def _head(self, rid: str, obj: str, created: int) -> bytes:
        """A stream's chunks up to their choice: ``data: {"id":...,"choices":[``."""
        return (b"data: " + json.dumps({"id": rid, "object": obj, "created": created,
                                        "model": self.model_name}, separators=(",", ":")).encode()[:-1]
                + b',"choices":[')

    @staticmethod
    def _choice(chat: bool, n: int, last: bool) -> bytes:
        """The n-th token's choice and the chunk's end."""
        text = FILLER[(n - 1) % len(FILLER)]
        if chat:
            delta = {"role": "assistant", "content": text} if n == 1 else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": "length" if last else None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length" if last else None,
                      "stop_reason": None}
        return json.dumps(choice, separators=(",", ":")).encode() + b"]}\n\n"

    @staticmethod
    async def _event(resp: web.StreamResponse, payload: dict) -> None:
        await resp.write(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")

    @staticmethod
    def _usage(ask, n: int) -> dict:
        return {"prompt_tokens": ask.prompt_tokens, "completion_tokens": n,
                "total_tokens": ask.prompt_tokens + n}

    def _whole(self, ask, rid: str, created: int, n: int) -> dict:
        text = _filler(n)
        if ask.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": "length"}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
            obj = "text_completion"
        return {"id": rid, "object": obj, "created": created, "model": self.model_name, "choices": [choice],
                "usage": self._usage(ask, n)}


# the n-th token (1 < n < max_tokens) is FILLER[(n - 1) % len(FILLER)]: _TEXT_MIDDLE[(n - 1) % len(FILLER)]
_TEXT_MIDDLE = tuple(Server._choice(False, i + 1, False) for i in range(len(FILLER)))
_CHAT_MIDDLE = tuple(Server._choice(True, i + 1 + len(FILLER), False) for i in range(len(FILLER)))

"""What a request body asks the simulated engine for: its prompt as token segments, its
output length, and whether it streams (``sim serve``, sim/serve/app.py).

A prompt's length is ``prompt_token_ids``' length when the body gives them
(``/v1/completions``), else the text's tokens through ``--tokenizer`` (sim/serve/tokenizer.py)
when the server has one, else an estimate from the text, one token per
:data:`CHARS_PER_TOKEN` characters (English text through a Llama-3 or GPT-4 tokenizer runs
about 4), plus :data:`TOKENS_PER_MESSAGE` per chat message for the chat template's markers.

The prefix cache needs token identity, not content: a prompt becomes a chain of segments
(sim/request.py), one per :data:`CHUNK_TOKENS` tokens (``CHUNK_TOKENS * CHARS_PER_TOKEN``
characters of text), each named by a hash of everything up to its end. Two prompts that
agree on their first k chunks share k segments, so a shared system prompt or a repeated
conversation hits the simulated prefix cache (to the chunk), as it would in vLLM. Token ids
(given, or a tokenizer's) are chunked the same way, so they share to the token chunk.

Output: filler text, exactly ``max_tokens`` tokens. The filler never samples an end of
sequence, so ``ignore_eos`` true or false gives the same length (``finish_reason`` is
always ``length``). Without ``max_tokens``: 16 on ``/v1/completions`` (the OpenAI API's
default) and the rest of the context on ``/v1/chat/completions`` (vLLM's).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # role markers and separators a chat template adds per message
CHUNK_TOKENS = 16
COMPLETIONS_DEFAULT_MAX_TOKENS = 16
_MASK = (1 << 62) - 1  # segment ids are positive; a request's own output is negative


class BadRequest(ValueError):
    """The body asks for something the server cannot serve: a 400 with this message."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


@dataclass(frozen=True)
class Ask:
    """One parsed request: ``segments`` (segment id, tokens), ``max_tokens`` to generate."""

    segments: tuple[tuple[int, int], ...]
    max_tokens: int
    stream: bool
    include_usage: bool
    chat: bool
    model: str

    @property
    def prompt_tokens(self) -> int:
        return sum(n for _, n in self.segments)


def _chain(pieces) -> tuple[tuple[int, int], ...]:
    """Segments of ``pieces`` ((bytes, tokens) in order), each id hashing all before it."""
    h = hashlib.blake2b(digest_size=8)
    out = []
    for data, n in pieces:
        h.update(data)
        out.append((int.from_bytes(h.copy().digest(), "little") & _MASK or 1, n))
    return tuple(out)


def text_segments(text: str) -> tuple[tuple[int, int], ...]:
    """``text``'s estimated tokens as chained segments (at least one token)."""
    step = CHUNK_TOKENS * CHARS_PER_TOKEN
    pieces = [(text[i:i + step].encode(), max(1, math.ceil(len(text[i:i + step]) / CHARS_PER_TOKEN)))
              for i in range(0, len(text), step)]
    return _chain(pieces or [(b"", 1)])


def id_segments(ids: list[int]) -> tuple[tuple[int, int], ...]:
    """Token ids as chained segments of CHUNK_TOKENS tokens."""
    pieces = [(",".join(map(str, ids[i:i + CHUNK_TOKENS])).encode() + b";", len(ids[i:i + CHUNK_TOKENS]))
              for i in range(0, len(ids), CHUNK_TOKENS)]
    return _chain(pieces)


def _messages(messages) -> list[tuple[str, str]]:
    """The chat's (role, content text) pairs, checked."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content}", "messages")
    parts = []
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise BadRequest("each message needs a 'role' and a 'content'", "messages")
        content = m.get("content") or ""
        if isinstance(content, list):  # content parts: the text ones count
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise BadRequest("a message's 'content' must be a string or a list of parts", "messages")
        parts.append((str(m["role"]), content))
    return parts


def _message_text(messages: list[tuple[str, str]]) -> str:
    # the template's markers as text of TOKENS_PER_MESSAGE tokens, so the estimate counts them
    return "".join(f"<|{role}|>".ljust(TOKENS_PER_MESSAGE * CHARS_PER_TOKEN, " ") + content
                   for role, content in messages)


def _prompt_segments(body: dict, chat: bool, tokenizer=None) -> tuple[tuple[int, int], ...]:
    if chat:
        messages = _messages(body.get("messages"))
        if tokenizer is not None:
            try:
                ids = tokenizer.chat(messages, TOKENS_PER_MESSAGE)
            except Exception as e:  # a chat template's own refusal (a role it does not know...)  # noqa: BLE001
                raise BadRequest(f"the tokenizer's chat template refused the messages: "
                                 f"{(str(e).splitlines() or [type(e).__name__])[0][:200]}", "messages") from None
            return id_segments(ids or [0])
        return text_segments(_message_text(messages))
    ids = body.get("prompt_token_ids")
    prompt = body.get("prompt")
    if ids is None and isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        ids = prompt  # the OpenAI API's prompt as a list of token ids
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool)
                                                           for t in ids):
            raise BadRequest("'prompt_token_ids' must be a non-empty list of integers", "prompt_token_ids")
        return id_segments(ids)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise BadRequest("'prompt' must be a string, a list of one string, or token ids "
                         "(several prompts in one request are not supported)", "prompt")
    if tokenizer is not None:
        return id_segments(tokenizer.encode(prompt) or [0])  # (an empty prompt: one token, as estimated)
    return text_segments(prompt)


def _int_field(body: dict, key: str, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"'{key}' must be an integer >= 1, got {value!r}", key)
    return value


def parse_ask(body, chat: bool, max_model_len: int, tokenizer=None) -> Ask:
    """The request ``body`` (parsed JSON) of a completions (``chat`` False) or chat
    completions call, checked; :class:`BadRequest` names what is wrong. ``tokenizer``
    (sim/serve/tokenizer.py) counts text prompts; ``prompt_token_ids`` keep priority."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if _int_field(body, "n", 1) != 1:
        raise BadRequest("only n=1 is supported", "n")
    if body.get("best_of") not in (None, 1):
        raise BadRequest("best_of is not supported", "best_of")
    segments = _prompt_segments(body, chat, tokenizer)
    num_prompt = sum(n for _, n in segments)
    room = max_model_len - num_prompt
    if room < 1:
        raise BadRequest(f"This model's maximum context length is {max_model_len} tokens; the prompt has "
                         f"{num_prompt}{' (estimated)' if tokenizer is None else ''} tokens", "messages" if chat else "prompt")
    key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _int_field(body, key, None)
    if max_tokens is None:
        max_tokens = room if chat else min(COMPLETIONS_DEFAULT_MAX_TOKENS, room)
    if max_tokens > room:
        raise BadRequest(f"This model's maximum context length is {max_model_len} tokens; the prompt "
                         f"({num_prompt} tokens) plus {key}={max_tokens} exceeds it", key)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false", "stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    return Ask(segments, max_tokens, stream, bool(opts.get("include_usage")) and stream, chat, model or "")

"""The OpenAI API as the real ``openai`` client speaks it to ``sim serve``: completions and chat
completions, streaming and not, usage, the errors vLLM gives (run in-process)."""

from __future__ import annotations

import aiohttp
import openai
import pytest

from tests.sim.serve.conftest import run_served, token_ids, write_scenario

MODEL = "llama-3-8b"


@pytest.fixture
def scenario(tmp_path):
    return write_scenario(tmp_path, [(0.0, 100, 10)])


def test_completions_and_chat_streaming_and_not(scenario, rng):
    ids = token_ids(300, rng)

    async def client(base):
        c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        models = [m.id async for m in c.models.list()]
        whole = await c.completions.create(model=MODEL, prompt=ids, max_tokens=12)
        chat = await c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi " * 50}],
                                               max_tokens=9, extra_body={"ignore_eos": True})
        chunks = [ch async for ch in await c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "tell me"}], max_tokens=7, stream=True,
            stream_options={"include_usage": True})]
        plain = [ch async for ch in await c.completions.create(model=MODEL, prompt="x" * 40, max_tokens=5,
                                                               stream=True)]
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/health") as r:
                health = r.status
        await c.close()
        return models, whole, chat, chunks, plain, health

    (models, whole, chat, chunks, plain, health), served = run_served(scenario, client, time_scale=4.0)
    assert models == [MODEL] and health == 200
    assert whole.usage.prompt_tokens == 300 and whole.usage.completion_tokens == 12
    assert whole.choices[0].finish_reason == "length" and whole.choices[0].text
    assert chat.usage.completion_tokens == 9 and chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content
    content = [ch for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(content) == 7 and content[0].choices[0].delta.role == "assistant"
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7  # include_usage
    assert len(plain) == 5 and all(ch.usage is None for ch in plain)
    engine = served.engines[0]
    assert (engine.stats.arrived, engine.stats.completed, engine.in_flight()) == (4, 4, 0)
    assert engine.stats.generation_tokens == 12 + 9 + 7 + 5


def test_errors_are_vllms(scenario):
    async def client(base):
        c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        errors = {}
        for name, call in (
                ("model", c.completions.create(model="gpt-4", prompt="hi", max_tokens=3)),
                ("max_tokens", c.completions.create(model=MODEL, prompt="hi", max_tokens=4096)),
                ("n", c.completions.create(model=MODEL, prompt="hi", n=2)),
                ("messages", c.chat.completions.create(model=MODEL, messages=[]))):
            try:
                await call
            except openai.APIStatusError as e:
                errors[name] = (e.status_code, e.body["param"] if isinstance(e.body, dict) else None)
        async with aiohttp.ClientSession() as http:
            async with http.post(base + "/v1/completions", data=b"{not json") as r:
                errors["json"] = (r.status, (await r.json())["error"]["type"])
        await c.close()
        return errors

    errors, served = run_served(scenario, client)
    assert errors == {"model": (404, "model"), "max_tokens": (400, "max_tokens"), "n": (400, "n"),
                      "messages": (400, "messages"), "json": (400, "BadRequestError")}
    assert served.engines[0].stats.arrived == 0  # refused before the engine: nothing to account

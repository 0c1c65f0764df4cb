"""Backpressure and disconnects: past the queue limit a request gets a 503 with a JSON error;
a client that goes away aborts its request in the engine (its KV freed); every request is
accounted for (run in-process, so the engine's state can be read afterwards)."""

from __future__ import annotations

import asyncio

import aiohttp
import openai
from prometheus_client.parser import text_string_to_metric_families

from sim.serve.engine import ABORT_REASON, QUEUE_FULL
from tests.sim.serve.conftest import run_served, token_ids, write_scenario

MODEL = "llama-3-8b"


def test_past_the_queue_limit_503(tmp_path, rng):
    scenario = write_scenario(tmp_path, [(0.0, 100, 10)], scheduler={"max_num_seqs": 1})
    n = 12
    prompts = [token_ids(200, rng) for _ in range(n)]

    async def client(base):
        c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)

        async def one(ids):
            try:
                r = await c.completions.create(model=MODEL, prompt=ids, max_tokens=8)
                return r.usage.completion_tokens
            except openai.APIStatusError as e:
                return e.status_code, e.body

        results = await asyncio.gather(*(one(ids) for ids in prompts))
        await c.close()
        return results

    results, served = run_served(scenario, client, max_waiting=2)
    engine = served.engines[0]
    refused = [r for r in results if isinstance(r, tuple)]
    assert refused, "a burst of 12 on one seat with 2 waiting places must overflow"
    for status, body in refused:
        assert status == 503 and body["param"] == QUEUE_FULL
    assert all(r == 8 for r in results if not isinstance(r, tuple))
    assert engine.stats.rejects == {QUEUE_FULL: len(refused)}
    assert (engine.stats.arrived, engine.stats.completed, engine.in_flight()) == (n, n - len(refused), 0)
    assert engine.stats.completed >= 3  # the one running and the two waiting at least


def test_a_client_that_goes_away_aborts_its_request(tmp_path, rng):
    scenario = write_scenario(tmp_path, [(0.0, 100, 10)])
    long_prompt = token_ids(500, rng)

    async def client(base):
        c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
        stream = await c.completions.create(model=MODEL, prompt=long_prompt, max_tokens=3000, stream=True)
        got = 0
        async for _ in stream:
            got += 1
            if got == 3:
                break
        await stream.close()  # the streaming client goes away after 3 tokens
        try:  # a non-streaming one gives up waiting
            await c.with_options(timeout=0.3).completions.create(model=MODEL, prompt=token_ids(50, rng),
                                                                 max_tokens=3000)
        except openai.APITimeoutError:
            got += 100
        await asyncio.sleep(0.3)  # the engine's next step boundary takes them out
        ok = await c.completions.create(model=MODEL, prompt=token_ids(50, rng), max_tokens=4)
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/metrics") as r:
                metrics = await r.text()
        await c.close()
        return got, ok.usage.completion_tokens, metrics

    (got, ok_tokens, metrics), served = run_served(scenario, client)
    engine = served.engines[0]
    assert got == 103 and ok_tokens == 4
    assert engine.stats.rejects == {ABORT_REASON: 2}
    assert (engine.stats.arrived, engine.stats.completed, engine.in_flight()) == (3, 1, 0)
    aborted = [r for r in engine.requests if r.reject_reason == ABORT_REASON]
    assert len(aborted) == 2 and all(r.num_generated < 3000 for r in aborted)
    assert engine.allocator.num_allocated_slots() == 0  # their KV was freed
    assert not engine.scheduler.has_work()
    fam = {f.name: f for f in text_string_to_metric_families(metrics)}
    success = {s.labels["finished_reason"]: s.value for s in fam["vllm:request_success"].samples}
    assert success == {"length": 1, "abort": 2}
    running = fam["vllm:num_requests_running"].samples[0].value
    assert running == 0

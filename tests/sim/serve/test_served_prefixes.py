"""Served prompts that share a prefix hit the simulated prefix cache as they would in vLLM (a
system prompt shared by several conversations, each turn re-sending the conversation so
far; token-id prompts that share their first tokens), and ``sim run`` on the server's
arrivals.csv (its prefix_parent, prefix_tokens columns) finds exactly the same hits, request by
request, with the same latencies."""

from __future__ import annotations

import asyncio
import csv
import json
import math

import openai

from sim.cli.main import main as sim_main
from sim.serve.results import write_served
from tests.sim.serve.conftest import run_served, token_ids, write_scenario

MODEL = "llama-3-8b"
SYSTEM = {"role": "system", "content": "You are the on-call assistant of a large serving cluster. " * 25}
QUESTIONS = ("Why is TTFT high?", "And after the restart?", "Which replica is the busiest now?")


def _csv(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_served_hits_are_the_replay_s(tmp_path, rng):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    shared_ids = token_ids(300, rng)
    tails = [token_ids(rng.randrange(20, 90), rng) for _ in range(4)]

    async def client(base):
        c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)

        async def conversation(k):
            messages = [SYSTEM]
            for q in QUESTIONS:
                messages.append({"role": "user", "content": f"(user {k}) {q}"})
                r = await c.chat.completions.create(model=MODEL, messages=messages, max_tokens=20 + 7 * k)
                messages.append({"role": "assistant", "content": r.choices[0].message.content})

        async def ids(i):
            await asyncio.sleep(0.01 * i)
            await c.completions.create(model=MODEL, prompt=shared_ids + tails[i], max_tokens=12, stream=True)

        await asyncio.gather(*(conversation(k) for k in range(3)), *(ids(i) for i in range(len(tails))))
        await c.close()

    _, served = run_served(scenario, client, time_scale=20.0)
    n = 3 * len(QUESTIONS) + len(tails)
    engine = served.engines[0]
    assert engine.stats.completed == n
    out = tmp_path / "served"
    write_served(out, served, (), report=True)
    summary = json.loads((out / "summary.json").read_text())
    hits = summary["kv"]["prefix_cache_hit_tokens"]
    assert hits == engine.allocator.prefix_cache_stats().hit_tokens
    # at least: the system prompt for all but the first request to reach the engine with it, and the
    # shared ids (whole blocks) for all but the first of them
    system_tokens = len(SYSTEM["content"]) // 4
    assert hits >= (3 * len(QUESTIONS) - 1) * (system_tokens // 16 * 16 - 16) + (len(tails) - 1) * 288

    trace = _csv(out / "arrivals.csv")
    assert len(trace) == n and any(int(r["prefix_parent"]) for r in trace)
    doc = (tmp_path / "scenario.yaml").read_text().replace(str(tmp_path / "arrivals.csv"), str(out / "arrivals.csv"))
    (tmp_path / "replay.yaml").write_text(doc)
    assert sim_main(["run", str(tmp_path / "replay.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    replay = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert replay["kv"]["prefix_cache_hit_tokens"] == hits
    mine = sorted(_csv(out / "requests.csv"), key=lambda r: float(r["arrival_s"]))
    theirs = _csv(tmp_path / "run" / "requests.csv")
    for a, b in zip(mine, theirs, strict=True):
        assert (a["num_prompt_tokens"], a["num_cached_tokens"]) == (b["num_prompt_tokens"], b["num_cached_tokens"])
        assert math.isclose(float(a["ttft_s"]), float(b["ttft_s"]), rel_tol=1e-5, abs_tol=1e-6)
        assert math.isclose(float(a["e2e_s"]), float(b["e2e_s"]), rel_tol=1e-5, abs_tol=1e-6)

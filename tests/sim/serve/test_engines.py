"""The served engine is ``sim run``'s engine under every policy: KV pressure with swap or
recompute preemption, static batching, a contiguous allocator, the eager profile (no front
end). A burst of requests against a small KV pool through ``sim serve`` (fast: the time scale
is high, and exactness does not depend on the host keeping up), then ``sim run`` on the
served arrivals (arrivals.csv): every request's TTFT, end-to-end latency and preemptions
agree, and the allocator's invariants hold; the ITL ``/metrics`` observed is summary.json's."""

from __future__ import annotations

import asyncio
import csv
import json
import math

import aiohttp
import pytest

from sim.cli.main import main as sim_main
from sim.engine.logs.itl import REL_ERROR
from sim.engine.logs.metrics import STAT_KEYS
from sim.serve.results import write_served
from tests.sim.serve.conftest import run_served, token_ids, write_scenario

N = 30
SMALL_POOL = {"num_gpu_blocks_override": 60, "max_model_len": 512}  # 960 tokens: a burst of 30 preempts


@pytest.mark.parametrize("sections", [
    {"engine": SMALL_POOL, "scheduler": {"preemption": "swap"}, "kv": {"swap_space_gb": 4}},
    {"engine": SMALL_POOL, "scheduler": {"preemption": "recompute"}},
    {"engine": {"profile": "eager", "max_model_len": 4096}, "scheduler": {"policy": "static", "max_num_seqs": 8}},
    {"engine": {"profile": "eager", "max_model_len": 4096}, "kv": {"allocator": "contiguous-static",
                                                                   "prefix_caching": False}},
], ids=["swap", "recompute", "static", "contiguous"])
def test_served_equals_sim_run(tmp_path, rng, sections):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)], **sections)
    asks = [(token_ids(rng.randrange(40, 300), rng), rng.randrange(5, 120)) for _ in range(N)]

    async def client(base):
        async with aiohttp.ClientSession() as http:
            async def one(i):
                await asyncio.sleep(i * 0.002)
                body = {"model": "llama-3-8b", "prompt_token_ids": asks[i][0], "max_tokens": asks[i][1],
                        "stream": i % 2 == 0}
                async with http.post(base + "/v1/completions", json=body) as r:
                    await r.read()
                    return r.status
            return await asyncio.gather(*(one(i) for i in range(N)))

    statuses, served = run_served(scenario, client, time_scale=50.0)
    engine = served.engines[0]
    assert statuses == [200] * N and engine.stats.completed == N
    engine.allocator.check_invariants()
    out = tmp_path / "served"
    write_served(out, served, (), report=False)
    doc = (tmp_path / "scenario.yaml").read_text().replace(str(tmp_path / "arrivals.csv"), str(out / "arrivals.csv"))
    (tmp_path / "replay.yaml").write_text(doc)
    assert sim_main(["run", str(tmp_path / "replay.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    with open(out / "requests.csv") as f:
        mine = sorted(csv.DictReader(f), key=lambda r: float(r["arrival_s"]))
    with open(tmp_path / "run" / "requests.csv") as f:
        theirs = list(csv.DictReader(f))
    assert len(mine) == len(theirs) == N
    for a, b in zip(mine, theirs):
        assert (a["num_prompt_tokens"], a["num_output_tokens"], a["num_preemptions"], a["status"]) == (
            b["num_prompt_tokens"], b["num_output_tokens"], b["num_preemptions"], b["status"])
        assert math.isclose(float(a["ttft_s"]), float(b["ttft_s"]), rel_tol=1e-5, abs_tol=1e-6)
        assert math.isclose(float(a["e2e_s"]), float(b["e2e_s"]), rel_tol=1e-5, abs_tol=1e-6)
    if "num_gpu_blocks_override" in sections.get("engine", {}):
        assert sum(int(r["num_preemptions"]) for r in mine) > 0  # the pool was under pressure
    # ITL: the gaps the server's /metrics histogram observed, token by token, are the run's
    itl = engine.stats.itl
    served, replay = (json.loads((d / "summary.json").read_text())["itl_s"] for d in (out, tmp_path / "run"))
    assert itl.n == sum(int(r["num_output_tokens"]) - 1 for r in mine) > 0
    assert math.isclose(served["mean"], itl.total / itl.n, rel_tol=1e-9)
    for q in STAT_KEYS:
        assert math.isclose(served[q], replay[q], rel_tol=2 * REL_ERROR + 1e-5), q

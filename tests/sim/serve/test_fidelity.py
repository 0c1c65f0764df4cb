"""The latencies clients measure against ``sim serve`` are the simulator's: ``sim serve`` run
as a user runs it (a process of its own, SIGTERM to stop, ``--out`` for its records), the
real OpenAI client at a fixed arrival rate, and ``sim run`` on a trace of the same arrivals.

Three comparisons. The served engine's own timeline (each request's TTFT and end-to-end
latency, simulated, in its requests.csv) equals ``sim run``'s on a trace of the arrival times
the server stamped: the same engine step, scheduler and cost model, so only CSV rounding
separates them. What the clients measure on the wall clock (times the time scale) matches
those figures up to timer and HTTP jitter, and ``sim run`` on the intended arrivals up to the
jitter of the sends as well.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import random

import aiohttp
import openai
from prometheus_client.parser import text_string_to_metric_families

from sim.cli.main import main as sim_main
from tests.sim.serve.conftest import ServeProcess, token_ids, write_scenario

SCALE = 2.0  # simulated seconds per wall second
RATE = 8.0  # requests per simulated second
N = 24
#: Client-side delay allowed, wall seconds: the client's own request building and parsing,
#: HTTP, and the event loops of both processes on a loaded 2-core machine (measured there:
#: 10-60 ms per request at a load average of 6); in simulated seconds it is this times SCALE.
#: A token is never early: the client may not see it before the simulation made it.
LATE_WALL_S = 0.15
MEDIAN_LATE_WALL_S = 0.06
EARLY_WALL_S = 0.002  # the two processes' clocks read apart (the same clock; rounding)
WARM_UP = [1, 2, 3]  # a prompt no test request shares


def _rows(rng: random.Random):
    return [(round(i / RATE, 6), rng.randrange(100, 900), rng.randrange(20, 90)) for i in range(N)]


async def _load(base: str, rows, prompts):
    """Send each row at its arrival (scaled) as a streaming completion; (send, first, last)
    wall times of each, then the metrics text once every answer is in."""
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    loop = asyncio.get_running_loop()
    assert [m.id async for m in client.models.list()] == ["llama-3-8b"]
    # a first streaming request warms the client's code paths (request 0 on the server)
    async for _ in await client.completions.create(model="llama-3-8b", prompt=WARM_UP, max_tokens=2, stream=True):
        pass
    start = loop.time() + 0.05

    async def one(i):
        arrival, _, out = rows[i]
        await asyncio.sleep(max(0.0, start + arrival / SCALE - loop.time()))
        sent = loop.time()
        stream = await client.completions.create(model="llama-3-8b", prompt=prompts[i], max_tokens=out,
                                                 stream=True, stream_options={"include_usage": True})
        first = last = rid = None
        chunks, usage = 0, None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                last = loop.time()
                first = first or last
                chunks += 1
            if chunk.usage is not None:
                usage = chunk.usage
            rid = chunk.id  # cmpl-<engine>-<request id>-<unique>
        return sent, first, last, chunks, usage, int(rid.split("-")[2])

    times = await asyncio.gather(*(one(i) for i in range(len(rows))))
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/metrics") as r:
            metrics = await r.text()
    await client.close()
    return times, metrics


def _csv(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def _sim_run(tmp_path, name, rows) -> list[dict]:
    """``sim run`` (the CLI, report on) on a trace of ``rows``; its requests.csv rows."""
    (tmp_path / name).mkdir()
    scenario = write_scenario(tmp_path / name, rows)
    out = tmp_path / name / "run"
    assert sim_main(["run", scenario, "--out", str(out), "--quiet"]) == 0
    assert (out / "report.html").stat().st_size > 0
    return _csv(out / "requests.csv")


def test_clients_measure_what_sim_run_says(tmp_path, rng):
    rows = _rows(rng)
    prompts = [token_ids(p, rng) for _, p, _ in rows]
    scenario = write_scenario(tmp_path, rows)
    out = tmp_path / "served"
    server = ServeProcess(scenario, "--time-scale", str(SCALE), "--out", str(out))
    try:
        times, metrics = asyncio.run(_load(server.base, rows, prompts))
    finally:
        status, stderr = server.stop()
    assert status == 0, stderr
    assert f"drained: {N + 1} arrived = {N + 1} completed + 0 rejected + 0 aborted + 0 in flight" in stderr
    served = json.loads((out / "serve.json").read_text())["total"]
    assert served == {"arrived": N + 1, "completed": N + 1, "rejected": 0, "aborted": 0, "in_flight": 0}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["completed"] == N + 1 and (out / "report.html").stat().st_size > 0
    everything = _csv(out / "requests.csv")
    assert len(everything) == N + 1

    # every request streamed exactly max_tokens tokens and was counted so
    for (_, p, o), (_, _, _, chunks, usage, _) in zip(rows, times):
        assert chunks == o and usage.completion_tokens == o and usage.prompt_tokens == p

    # 1. the served engine's timeline is sim run's on the arrivals the server stamped
    stamped = [(float(a), int(p), int(o)) for a, p, o, *_ in
               (line.split(",") for line in (out / "arrivals.csv").read_text().splitlines()[1:])]
    assert [(p, o) for _, p, o in stamped] == [(int(r["num_prompt_tokens"]), int(r["num_output_tokens"]))
                                               for r in everything]
    exact = _sim_run(tmp_path, "stamped", stamped)
    for req, row in zip(everything, exact):
        assert math.isclose(float(req["ttft_s"]), float(row["ttft_s"]), abs_tol=1e-4)
        assert math.isclose(float(req["e2e_s"]), float(row["e2e_s"]), abs_tol=1e-4)

    # 2. what the clients measured, in simulated seconds, is the served engine's figures
    late, median_late, early = LATE_WALL_S * SCALE, MEDIAN_LATE_WALL_S * SCALE, EARLY_WALL_S * SCALE
    client_ttft, lateness = [], []
    assert sorted(t[5] for t in times) == list(range(1, N + 1))  # each answer names its request
    for sent, first, last, _, _, rid in times:  # in the order of rows
        req = everything[rid]
        client_ttft.append((first - sent) * SCALE)
        for measured, simulated in ((client_ttft[-1], float(req["ttft_s"])), ((last - sent) * SCALE,
                                                                               float(req["e2e_s"]))):
            assert -early <= measured - simulated <= late
            lateness.append(measured - simulated)
    assert sorted(lateness)[len(lateness) // 2] <= median_late

    # 3. and sim run's on the arrivals intended (the sends' own jitter on top)
    intended = _sim_run(tmp_path, "intended", rows)
    sim_ttft = [float(r["ttft_s"]) for r in intended]
    diffs = sorted(abs(a - b) for a, b in zip(client_ttft, sim_ttft))
    assert diffs[len(diffs) // 2] <= median_late  # the median request within the jitter
    assert abs(sum(client_ttft) - sum(sim_ttft)) / N <= median_late

    # 4. /metrics says the same, under vLLM's names
    fam = {f.name: f for f in text_string_to_metric_families(metrics)}
    ttft_h = {s.name: s.value for s in fam["vllm:time_to_first_token_seconds"].samples if "le" not in s.labels}
    assert ttft_h["vllm:time_to_first_token_seconds_count"] == N + 1
    assert math.isclose(ttft_h["vllm:time_to_first_token_seconds_sum"],
                        sum(float(r["ttft_s"]) for r in everything), abs_tol=1e-4 * N)
    itl = {s.name: s.value for s in fam["vllm:inter_token_latency_seconds"].samples if "le" not in s.labels}
    assert itl["vllm:inter_token_latency_seconds_count"] == sum(o - 1 for _, _, o in rows) + 1
    success = {s.labels["finished_reason"]: s.value for s in fam["vllm:request_success"].samples}
    assert success == {"length": N + 1, "abort": 0}
    value = {f.name: f.samples[0].value for f in fam.values() if len(f.samples) == 1}
    assert value["vllm:generation_tokens"] == sum(o for _, _, o in rows) + 2
    assert value["vllm:prompt_tokens"] == sum(p for _, p, _ in rows) + len(WARM_UP)
    assert value["vllm:num_requests_running"] == 0 and value["vllm:num_requests_waiting"] == 0
    assert value["vllm:prefix_cache_hits"] == summary["kv"]["prefix_cache_hit_tokens"]
    assert value["vllm:prefix_cache_queries"] >= sum(p for _, p, _ in rows)

"""`sim serve` under many streaming clients: client-measured TTFT against the simulator's own.

Starts `sim serve SCENARIO --time-scale S --out DIR` as a process of its own, runs CLIENTS
concurrent streaming clients in this process (each sends REQUESTS completions one after
another, asyncio, raw SSE over aiohttp or the `openai` client), sends SIGTERM, and pairs each
answer with the served engine's row of requests.csv by its id (`cmpl-<engine>-<request>-...`).
Both processes read CLOCK_MONOTONIC (asyncio's loop.time()), so serve.json's clock_t0_monotonic
splits the difference: from the client's send to the server's arrival stamp (HTTP, both event
loops), and from the token's due time to its receipt (the server's write lateness, then the
client's parsing). For each request: the client's TTFT (from just before sending to the first token chunk,
times the time scale: simulated seconds; each client's connection opened beforehand unless --cold) against the simulator's TTFT for it; prints the
absolute differences' mean, p50, p99 and max in milliseconds (simulated), the signed mean,
and the server's largest loop lag. Also replays arrivals.csv with `sim run` and reports the
largest difference between the served engine's TTFTs and `sim run`'s (the engine's own
exactness). Repeat with --repeats for the spread.

    python benchmarks/serve_ttft.py --clients 200 --requests 3 --repeats 3
    python benchmarks/serve_ttft.py --clients 200 --requests 3 --rate 100   # open loop, staggered
    python benchmarks/serve_ttft.py --clients 200 --requests 3 --cold       # connections opened in the burst
    SERVE_PROFILE=/tmp/serve.prof python benchmarks/serve_ttft.py ...        # the server under cProfile
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def start_server(scenario: str, scale: float, out: Path, extra: list[str]):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    profile = ["-m", "cProfile", "-o", os.environ["SERVE_PROFILE"]] if os.environ.get("SERVE_PROFILE") else []
    proc = subprocess.Popen([sys.executable, *profile, "-m", "sim.cli", "serve", scenario, "--port", "0", "--time-scale",
                             str(scale), "--out", str(out), "--force", *extra],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    line = proc.stderr.readline()
    if "http://" not in line:
        raise SystemExit(f"sim serve did not start: {line}{proc.stderr.read()}")
    return proc, "http://" + line.split("http://", 1)[1].split("/v1", 1)[0]


async def raw_client(base: str, prompts: list, max_tokens: int, n: int, results: list, session):
    loop = asyncio.get_running_loop()
    for prompt_ids in prompts:
        body = {"model": MODEL[0], "prompt": prompt_ids, "max_tokens": max_tokens, "stream": True}
        sent = loop.time()
        first, rid = None, None
        async with session.post(base + "/v1/completions", json=body) as r:
            async for line in r.content:
                if line.startswith(b"data: {") and first is None:
                    first = loop.time()
                    rid = json.loads(line[6:])["id"]
        results.append((rid, sent, first))


async def openai_client(base: str, prompts: list, max_tokens: int, n: int, results: list, client):
    loop = asyncio.get_running_loop()
    for prompt_ids in prompts:
        sent = loop.time()
        first, rid = None, None
        async for chunk in await client.completions.create(model=MODEL[0], prompt=prompt_ids, max_tokens=max_tokens,
                                                           stream=True):
            if first is None:
                first, rid = loop.time(), chunk.id
        results.append((rid, sent, first))


MODEL = ["llama-3-8b"]


async def load(base: str, args) -> list:
    import random

    import aiohttp

    rng = random.Random(7)
    results: list = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async with session.get(base + "/v1/models") as r:
            MODEL[0] = (await r.json())["data"][0]["id"]
        if not args.cold:  # one open connection per client first: the first round then measures the
            # server, not 200 TCP handshakes at once (cold, they put ~65 ms before the first round's stamps)
            async def touch():
                async with session.get(base + "/health") as r:
                    await r.read()

            await asyncio.gather(*(touch() for _ in range(args.clients)))
        # every request its own prompt (no prefix-cache hits: arrivals.csv's replay has none either)
        prompts = [[[rng.randrange(1, 128000) for _ in range(args.prompt_tokens)] for _ in range(args.requests)]
                   for _ in range(args.clients)]
        if args.client == "openai":
            import httpx
            import openai

            client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0,
                                        http_client=openai.DefaultAsyncHttpxClient(
                                            limits=httpx.Limits(max_connections=None)))
            await asyncio.gather(*(openai_client(base, p, args.max_tokens, args.requests, results, client)
                                   for p in prompts))
            await client.close()
        elif args.rate:  # open loop: request i sent at i / rate, whatever is in flight
            loop = asyncio.get_running_loop()
            start = loop.time() + 0.1
            flat = [p for ps in prompts for p in ps]

            async def at(i, p):
                await asyncio.sleep(max(0.0, start + i / args.rate - loop.time()))
                await raw_client(base, [p], args.max_tokens, 1, results, session)

            await asyncio.gather(*(at(i, p) for i, p in enumerate(flat)))
        else:
            await asyncio.gather(*(raw_client(base, p, args.max_tokens, args.requests, results, session)
                                   for p in prompts))
    return results


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def one_run(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "served"
        proc, base = start_server(args.scenario, args.time_scale, out, args.serve_args)
        t0 = time.perf_counter()
        try:
            results = asyncio.run(load(base, args))
        finally:
            proc.send_signal(signal.SIGTERM)
            err = proc.stderr.read()
            code = proc.wait(120)
        wall = time.perf_counter() - t0
        if code != 0:
            raise SystemExit(f"sim serve exited {code}: {err}")
        with open(out / "requests.csv") as f:
            rows = {int(r["request_id"]): r for r in csv.DictReader(f)}
        served = json.loads((out / "serve.json").read_text())
        diffs, before, after = [], [], []
        t0, scale = served["clock_t0_monotonic"], served["time_scale"]  # both processes read CLOCK_MONOTONIC
        for rid, sent, first in results:
            row = rows[int(rid.split("-")[2])]
            diffs.append((first - sent) * args.time_scale - float(row["ttft_s"]))
            before.append(t0 + float(row["arrival_s"]) / scale - sent)  # send -> the server's stamp
            after.append(first - (t0 + (float(row["arrival_s"]) + float(row["ttft_s"])) / scale))  # due -> received
        # the served engine against sim run on the same arrivals (arrivals.csv)
        replay = Path(tmp) / "replay"
        sc = Path(tmp) / "replay.yaml"
        import yaml

        from sim.config.scenario import load_scenario

        doc = yaml.safe_load(Path(load_scenario(args.scenario).source_path).read_text())
        doc["workload"] = {"trace": {"path": str(out / "arrivals.csv")}}
        sc.write_text(yaml.safe_dump(doc))
        subprocess.run([sys.executable, "-m", "sim.cli", "run", str(sc), "--out", str(replay), "--quiet",
                        "--no-report"], check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        with open(replay / "requests.csv") as f:
            sim_rows = list(csv.DictReader(f))
        served_rows = sorted(rows.values(), key=lambda r: float(r["arrival_s"]))
        engine_vs_run = max(abs(float(a["ttft_s"]) - float(b["ttft_s"])) for a, b in zip(served_rows, sim_rows))
    absd = [abs(d) * 1e3 for d in diffs]
    sim_ttft = [float(r["ttft_s"]) * 1e3 for r in rows.values()]
    return {"requests": len(diffs), "wall_s": wall, "abs_mean_ms": statistics.mean(absd),
            "abs_p50_ms": pct(absd, 0.5), "abs_p99_ms": pct(absd, 0.99), "abs_max_ms": max(absd),
            "signed_mean_ms": statistics.mean(diffs) * 1e3, "sim_ttft_p50_ms": pct(sim_ttft, 0.5),
            "sim_ttft_p99_ms": pct(sim_ttft, 0.99),
            "within_5ms_or_5pct": sum(abs(d) * 1e3 <= max(5.0, 0.05 * s)
                                      for d, s in zip(diffs, [float(rows[int(r.split('-')[2])]["ttft_s"]) * 1e3
                                                              for r, _, _ in results])) / len(diffs),
            "max_lag_ms": max(e["max_lag_s"] for e in served["engines"]) * 1e3,
            "send_to_stamp_wall_ms_mean": statistics.mean(before) * 1e3,
            "send_to_stamp_wall_ms_p99": pct(before, 0.99) * 1e3,
            "due_to_received_wall_ms_mean": statistics.mean(after) * 1e3,
            "due_to_received_wall_ms_p99": pct(after, 0.99) * 1e3,
            "server_first_write_late_ms_mean": statistics.mean(
                e["first_token_write_late_s"]["mean"] for e in served["engines"]) * 1e3 / scale,
            "engine_vs_sim_run_max_ms": engine_vs_run * 1e3, "accounting": served["total"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="chatbot")
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--requests", type=int, default=3, help="streaming requests per client, one after another")
    p.add_argument("--prompt-tokens", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--client", choices=("raw", "openai"), default="raw")
    p.add_argument("--rate", type=float, default=0.0,
                   help="open loop instead: clients x requests requests at this many per wall second (raw client)")
    p.add_argument("--cold", action="store_true",
                   help="no connection warm-up: each client's first request also opens its TCP connection")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("serve_args", nargs="*", help="more `sim serve` flags (after --)")
    args = p.parse_args()
    for i in range(args.repeats):
        print(json.dumps(one_run(args)), flush=True)


if __name__ == "__main__":
    main()

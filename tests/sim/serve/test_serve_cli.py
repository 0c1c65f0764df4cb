"""``sim serve`` as a user runs it: bad flags and unsupported scenarios in one line (exit 2),
the missing extra named, replicas behind the router on one port, and SIGTERM draining what
is in flight before exiting 0 with the run written."""

from __future__ import annotations

import asyncio
import csv
import json
import subprocess
import sys

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.cli.main import main as sim_main
from tests.sim.serve.conftest import REPO, ServeProcess, write_scenario

MODEL = "llama-3-8b"


@pytest.mark.parametrize("flags, key", [
    (["--time-scale", "0"], "--time-scale"),
    (["--time-scale", "nan"], "--time-scale"),
    (["--port", "70000"], "--port"),
    (["--replicas", "0"], "--replicas"),
    (["--max-waiting", "0"], "--max-waiting"),
    (["--set", "engine.pipeline_parallel_size=2"], "engine.pipeline_parallel_size"),
])
def test_bad_input_is_one_line(tmp_path, capsys, flags, key):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    assert sim_main(["serve", scenario, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and key in err


def test_without_the_extra_it_says_what_to_install(tmp_path):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    code = ("import sys; sys.modules['aiohttp'] = None\n"
            "from sim.cli.main import main; sys.exit(main(['serve', sys.argv[1]]))")
    proc = subprocess.run([sys.executable, "-c", code, scenario], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: sim serve needs aiohttp: pip install 'kvsim[serve]'"]


def test_replicas_behind_the_router_and_a_drain_on_sigterm(tmp_path):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)], cluster={"router": "round-robin"})
    out = tmp_path / "served"
    server = ServeProcess(scenario, "--replicas", "2", "--time-scale", "2", "--out", str(out))

    async def client():
        c = openai.AsyncOpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0)
        short = [await c.completions.create(model=MODEL, prompt="hello " * 30, max_tokens=5) for _ in range(3)]
        stream = await c.completions.create(model=MODEL, prompt="a long answer", max_tokens=150, stream=True)
        n = 0
        async for chunk in stream:
            n += 1
            if n == 1:  # the first token is out: stop the server, which must finish this answer
                server.proc.send_signal(15)
                await asyncio.sleep(0.2)
                async with aiohttp.ClientSession() as http:
                    async with http.get(server.base + "/health") as r:
                        health = r.status
                    async with http.get(server.base + "/metrics") as r:
                        metrics = await r.text()
        await c.close()
        return [r.usage.completion_tokens for r in short], n, health, metrics

    short, streamed, health, metrics = asyncio.run(client())
    status, stderr = server.proc.wait(60), server.first_line + server.proc.stderr.read()
    assert status == 0, stderr
    assert short == [5, 5, 5] and streamed == 150  # the answer in flight was finished
    assert health == 503  # draining
    assert "drained: 4 arrived = 4 completed + 0 rejected + 0 aborted + 0 in flight" in stderr
    fam = {f.name: f for f in text_string_to_metric_families(metrics)}
    arrived = {s.labels["engine"]: s.value for s in fam["kvsim:requests_arrived"].samples}
    assert arrived == {"0": 2, "1": 2}  # round-robin
    served = json.loads((out / "serve.json").read_text())
    assert [e["arrived"] for e in served["engines"]] == [2, 2] and served["total"]["completed"] == 4
    summary = json.loads((out / "summary.json").read_text())  # a cluster run's, as sim run writes one
    assert summary["requests"]["completed"] == 4 and summary["cluster"]["router"] == "round-robin"
    assert [r["requests"]["completed"] for r in summary["replicas"]] == [2, 2]
    assert (out / "report.html").stat().st_size > 0
    with open(out / "requests.csv") as f:
        assert sorted(row["replica"] for row in csv.DictReader(f)) == ["0", "0", "1", "1"]
    assert len((out / "arrivals.csv").read_text().splitlines()) == 5


def test_a_stream_cut_short_is_counted_aborted_without_noise(tmp_path):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    server = ServeProcess(scenario)

    async def client():
        body = {"model": MODEL, "prompt": "go on", "max_tokens": 2000, "stream": True}
        async with aiohttp.ClientSession() as http:
            async with http.post(server.base + "/v1/completions", json=body) as r:
                got = 0
                async for line in r.content:
                    got += line.startswith(b"data: {")
                    if got == 5:
                        break  # and the connection is dropped
            await asyncio.sleep(0.2)
            async with http.get(server.base + "/metrics") as r:
                return got, await r.text()

    got, metrics = asyncio.run(client())
    status, stderr = server.stop()
    assert status == 0 and got == 5
    assert "drained: 1 arrived = 0 completed + 0 rejected + 1 aborted + 0 in flight" in stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 2, stderr
    fam = {f.name: f for f in text_string_to_metric_families(metrics)}
    assert fam["vllm:kv_cache_usage_perc"].samples[0].value == 0.0  # its blocks were freed

"""``sim serve --replicas N --replica-ports``: each replica a vLLM server of its own on its own
port, for an external router, all on one simulated clock. Real clients send to both ports;
each port's /metrics, /health and /v1/models speak for its replica alone; --out writes the
cluster run (summary.json with a replica entry each, requests.csv's replica column) and
serve.json accounts every request per replica (with its port) and in total."""

from __future__ import annotations

import asyncio
import csv
import json

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.cli.main import main as sim_main
from sim.errors import ConfigError
from sim.serve.results import EXTERNAL_NOTE
from sim.serve.server import replica_port_list
from tests.sim.serve.conftest import ServeProcess, write_scenario

MODEL = "llama-3-8b"
SYSTEM = {"role": "system", "content": "You answer questions about the simulated cluster. " * 30}


def _one_value(fam, name):
    samples = fam[name].samples
    assert len(samples) == 1 and samples[0].labels["engine"] == "0"  # one engine behind each port
    return samples[0].value


def test_each_replica_serves_its_own_port(tmp_path):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)], cluster={"router": "round-robin"})
    out = tmp_path / "served"
    server = ServeProcess(scenario, "--replicas", "2", "--replica-ports", "0,0", "--time-scale", "4",
                          "--out", str(out))

    async def client():
        assert len(server.bases) == 2 and server.bases[0] != server.bases[1]
        a = openai.AsyncOpenAI(base_url=server.bases[0] + "/v1", api_key="none", max_retries=0)
        b = openai.AsyncOpenAI(base_url=server.bases[1] + "/v1", api_key="none", max_retries=0)
        # replica 0: three chats on one system prompt (its prefix cache finds it); replica 1: two others
        for q in ("what runs?", "what waits?", "what is cached?"):
            r = await a.chat.completions.create(model=MODEL, messages=[SYSTEM, {"role": "user", "content": q}],
                                                max_tokens=4)
            assert r.usage.completion_tokens == 4
        for text in ("one unrelated prompt", "another unrelated prompt"):
            chunks = [c async for c in await b.completions.create(model=MODEL, prompt=text * 20, max_tokens=6,
                                                                   stream=True)]
            assert sum(1 for c in chunks if c.choices and c.choices[0].text) == 6
        models = [[m.id async for m in c.models.list()] for c in (a, b)]
        metrics = []
        async with aiohttp.ClientSession() as http:
            for base in server.bases:
                async with http.get(base + "/health") as r:
                    assert r.status == 200
                async with http.get(base + "/metrics") as r:
                    metrics.append({f.name: f for f in text_string_to_metric_families(await r.text())})
        await a.close()
        await b.close()
        return models, metrics

    models, metrics = asyncio.run(client())
    status, stderr = server.stop()
    assert status == 0, stderr
    assert models == [[MODEL], [MODEL]]
    assert [_one_value(m, "kvsim:requests_arrived") for m in metrics] == [3, 2]
    success = [{s.labels["finished_reason"]: s.value for s in m["vllm:request_success"].samples} for m in metrics]
    assert success == [{"length": 3, "abort": 0}, {"length": 2, "abort": 0}]
    hits = [_one_value(m, "vllm:prefix_cache_hits") for m in metrics]
    assert hits[0] >= 2 * 16 * (len(SYSTEM["content"]) // 64) and hits[1] == 0  # the system prompt, twice
    assert "drained: 5 arrived = 5 completed + 0 rejected + 0 aborted + 0 in flight" in stderr

    accounting = json.loads((out / "serve.json").read_text())
    ports = [int(base.rsplit(":", 1)[1]) for base in server.bases]
    assert [(e["arrived"], e["completed"], e["port"]) for e in accounting["engines"]] == [(3, 3, ports[0]),
                                                                                         (2, 2, ports[1])]
    assert accounting["total"] == {"arrived": 5, "completed": 5, "rejected": 0, "aborted": 0, "in_flight": 0}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["completed"] == 5 and EXTERNAL_NOTE in summary["notes"]
    assert [r["requests"]["completed"] for r in summary["replicas"]] == [3, 2]
    assert summary["kv"]["prefix_cache_hit_tokens"] == hits[0]
    assert (out / "report.html").stat().st_size > 0
    with open(out / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["replica"] for r in rows] == ["0", "0", "0", "1", "1"]  # in arrival order
    assert len((out / "arrivals.csv").read_text().splitlines()) == 6


def test_the_flag_alone_counts_up_from_port():
    assert replica_port_list("", 9000, 3) == [9000, 9001, 9002]
    assert replica_port_list("", 0, 2) == [0, 0]  # each a free one
    assert replica_port_list("8100,8200", 8000, 2) == [8100, 8200]
    assert replica_port_list(None, 8000, 2) is None
    for spec, port in (("8100", 8000), ("8100,8100", 8000), ("a,b", 8000), ("", 65535)):
        with pytest.raises(ConfigError):
            replica_port_list(spec, port, 2)


@pytest.mark.parametrize("flags", [["--replicas", "2", "--replica-ports", "8100"],
                                   ["--replicas", "2", "--replica-ports", "8100,x"]])
def test_bad_replica_ports_are_one_line(tmp_path, capsys, flags):
    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    assert sim_main(["serve", scenario, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --replica-ports: ") and "\n" not in err


def test_a_port_in_use_is_one_line(tmp_path, capsys):
    import socket

    scenario = write_scenario(tmp_path, [(0.0, 10, 10)])
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert sim_main(["serve", scenario, "--replicas", "2", "--replica-ports", f"0,{taken}", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --replica-ports: {taken}: cannot listen on 127.0.0.1:{taken}") and "\n" not in err

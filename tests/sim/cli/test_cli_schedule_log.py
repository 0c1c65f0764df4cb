"""`sim run --schedule`: schedule.jsonl, every step's decisions, one JSON line a step
(sim/engine/logs/schedule_log.py). The run it logs is the same run: every step goes through
the engine step (no macro-step stretches), and the results do not change."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli.main import main

SCENARIO = {
    "name": "schedule-log", "model": "tiny-llama", "gpu": "a100-80gb",
    "engine": {"profile": "vllm-v1", "max_model_len": 512, "num_gpu_blocks_override": 40},
    "kv": {"allocator": "paged", "block_size": 16, "prefix_caching": True},
    "scheduler": {"policy": "chunked-prefill", "max_num_batched_tokens": 256},
    "workload": {"num_requests": 40, "arrival": {"type": "poisson", "rate": 200.0},
                 "prompt_tokens": {"type": "uniform", "low": 20, "high": 300},
                 "output_tokens": {"type": "uniform", "low": 1, "high": 120},
                 "shared_prefix": {"num_prefixes": 2, "prefix_tokens": 64, "fraction": 0.7}},
}


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return str(path)


def _summary(out):
    s = json.loads((out / "summary.json").read_text())
    s.pop("sim_wall_s")
    return s


def test_the_log_accounts_for_every_step_request_and_token(scenario, tmp_path):
    assert main(["run", scenario, "--out", str(tmp_path / "plain"), "--quiet", "--no-report"]) == 0
    out = tmp_path / "logged"
    assert main(["run", scenario, "--out", str(out), "--quiet", "--no-report", "--schedule"]) == 0
    assert not (tmp_path / "plain" / "schedule.jsonl").exists()
    summary = _summary(out)
    assert summary == _summary(tmp_path / "plain")  # logging every step changes nothing
    recs = [json.loads(line) for line in (out / "schedule.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == list(range(len(recs)))
    assert sum(1 for r in recs if r["scheduled"]) == summary["engine"]["num_steps"]
    finished = [i for r in recs for i in r["finished"]]
    assert len(finished) == len(set(finished)) == summary["requests"]["completed"]
    assert sum(len(r["preempted"]) for r in recs) == summary["preemptions"]["recompute"]
    # A request's scheduled tokens: its prompt less its first admission's hits, and one per
    # output token but the last (sampled, never computed), plus what preemption threw away.
    rows = {int(row.split(",")[0]): row.split(",") for row in (out / "requests.csv").read_text().splitlines()[1:]}
    header = (out / "requests.csv").read_text().splitlines()[0].split(",")
    col = {name: i for i, name in enumerate(header)}
    tokens: dict[int, int] = {}
    hits: dict[int, int] = {}
    for r in recs:
        for rid, n in r["scheduled"]:
            tokens[rid] = tokens.get(rid, 0) + n
        for rid, n in r["hits"].items():
            hits.setdefault(int(rid), n)
        assert 0 <= r["free_blocks"] <= 40 - 1  # one of the 40 is vLLM's null block
    for rid in finished:
        row = rows[rid]
        prompt, output = int(row[col["num_prompt_tokens"]]), int(row[col["num_output_tokens"]])
        assert hits[rid] == int(row[col["num_cached_tokens"]])
        if int(row[col["num_preemptions"]]) == 0:
            assert tokens[rid] + hits[rid] == prompt + output - 1, rid
    assert recs[-1]["running"] == recs[-1]["waiting"] == 0 and recs[-1]["free_blocks"] == 39


def test_a_cluster_is_refused_with_one_line(scenario, tmp_path, capsys):
    data = dict(SCENARIO, cluster={"num_replicas": 2})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "c"), "--quiet", "--schedule"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cluster.num_replicas" in err[0] and "--schedule" in err[0]
    assert not (tmp_path / "c").exists()

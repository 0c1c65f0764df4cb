"""What ``sim run`` and ``sim sweep`` write for replicas of a pipeline-parallel engine
(sim/engine/pipeline/cluster.py, sim/engine/pipeline/summary.py): the cluster summary with
N x tp x pp GPUs, a ``parallel`` block per replica, requests.csv's ``replica`` column,
the terminal table and report.html."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from sim.cli.main import main

#: Llama-3-70B on H100s, tp 2 x pp 2 a replica, 3 replicas: 12 GPUs.
SCENARIO = {
    "name": "pp-fleet", "seed": 5, "model": "llama-3-70b", "gpu": "h100-sxm",
    "engine": {"max_model_len": 4096, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
    "cluster": {"num_replicas": 3, "router": "least-outstanding"},
    "workload": {"num_requests": 45, "arrival": {"type": "poisson", "rate": 12.0},
                 "prompt_tokens": {"type": "fixed", "value": 400},
                 "output_tokens": {"type": "fixed", "value": 30}},
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ppfleet")
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = tmp / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    return tmp, path, out, json.loads((out / "summary.json").read_text())


def test_the_summary_has_the_cluster_the_gpus_and_each_replicas_stages(fleet) -> None:
    _, _, _, s = fleet
    assert s["requests"]["completed"] == s["requests"]["arrived"] == 45
    assert s["cluster"]["num_replicas"] == len(s["replicas"]) == 3 and s["cluster"]["router"] == "least-outstanding"
    assert s["cluster"]["gpus"] == 3 * 2 * 2
    par = s["parallel"]
    assert (par["form"], par["num_replicas"], par["gpus_per_replica"], par["gpus"]) == ("batch-queue", 3, 4, 12)
    assert par["stage_layers"] == [40, 40] and par["max_batches_in_flight"] == 2
    assert s["kv"]["num_gpu_blocks"] == 3 * par["num_gpu_blocks_per_replica"]  # pools sum over replicas
    for entry in s["replicas"]:
        mine = entry["parallel"]
        assert len(mine["stages"]) == 2 and all(0.0 < st["busy_share"] <= 1.0 for st in mine["stages"])
        assert 1 <= mine["peak_batches_in_flight"] <= 2 and mine["batches"] > 0
        assert entry["requests"]["arrived"] > 0
    assert sum(e["parallel"]["batches"] for e in s["replicas"]) == par["batches"] == s["engine"]["num_steps"]
    assert any("3 x 2 x 2 = 12 GPUs" in n for n in s["notes"])


def test_requests_csv_names_each_requests_replica(fleet) -> None:
    _, _, out, s = fleet
    rows = list(csv.DictReader((out / "requests.csv").open()))
    assert len(rows) == 45
    counts = [sum(r["replica"] == str(i) for r in rows) for i in range(3)]
    assert counts == [e["requests"]["arrived"] for e in s["replicas"]]
    steps = list(csv.DictReader((out / "steps.csv").open()))
    assert len(steps) == s["engine"]["num_steps"] and {r["replica"] for r in steps} == {"0", "1", "2"}


def test_report_draws_the_replicas(fleet) -> None:
    _, _, out, s = fleet
    html = (out / "report.html").read_text()
    assert "section-error" not in html and "<h2>Replicas</h2>" in html and "Virtual engines" not in html
    section = html[html.index("<h2>Replicas</h2>"):].split("</table>")[0]
    assert section.count("<tr>") == 1 + len(s["replicas"])


def test_terminal_table_counts_the_gpus_and_lists_the_replicas(fleet, capsys) -> None:
    tmp, path, _, _ = fleet
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(tmp / "t"), "--no-report"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("replica ")] == ["0", "1", "2"]
    assert any(ln.startswith("cluster ") and "3 replicas" in ln for ln in lines)
    assert any(ln.startswith("note ") and "12 GPUs" in ln for ln in lines)


def test_a_sweep_varies_the_replicas_of_a_pipeline_engine(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "cluster": {"num_replicas": 1, "router": "round-robin"}}))
    assert main(["sweep", str(path), "--grid", "cluster.num_replicas=1,2,3", "--out", str(tmp_path / "sw"),
                 "--quiet"]) == 0
    rows = list(csv.DictReader((tmp_path / "sw" / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert [int(r["parallel.gpus"]) for r in rows] == [4, 8, 12]
    assert [int(r["requests.completed"]) for r in rows] == [45] * 3
    assert [r["parallel.form"] for r in rows] == ["batch-queue"] * 3


def test_the_shipped_fleet_scenario_runs_two_pipeline_replicas_on_16_gpus() -> None:
    from pathlib import Path

    from sim.config.scenario import load_scenario
    from sim.engine.pipeline.simulation import PipelineSimulation
    from sim.engine.pipeline.cluster import PipelineCluster
    from sim.engine.pipeline.summary import summarize_pipeline

    path = Path(__file__).resolve().parents[3] / "scenarios" / "llama3-70b-pp-fleet.yaml"
    sim = PipelineSimulation(load_scenario(path, ["workload.num_requests=100"]))
    assert isinstance(sim, PipelineCluster)
    s = summarize_pipeline(sim.run())
    assert (s["parallel"]["gpus"], s["cluster"]["router"], len(s["replicas"])) == (16, "prefix-aware", 2)
    assert s["requests"]["completed"] == 100 and min(e["requests"]["arrived"] for e in s["replicas"]) > 30

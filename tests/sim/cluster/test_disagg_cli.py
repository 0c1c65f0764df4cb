"""`sim run` and `sim sweep` of a disaggregated cluster: summary.json's transfer figures and
roles, the report's replicas table, the terminal table, and the shipped scenario."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from cluster_world import BASE
from sim.cli.main import main
from sim.config.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
SPLIT = {"prefill_replicas": 1, "decode_replicas": 2,
         "kv_transfer": {"bandwidth_gbps": 200, "latency_s": 0.0005, "granularity": "layer"}}
SMALL = {**BASE, "workload": {**BASE["workload"], "num_requests": 80}}


@pytest.fixture(scope="module")
def disagg_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("disagg")
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "cluster": {"disaggregation": SPLIT}}))
    assert main(["run", str(path), "--out", str(tmp / "out")]) == 0
    return tmp / "out", json.loads((tmp / "out" / "summary.json").read_text())


def test_summary_has_roles_pools_and_transfer_figures(disagg_run) -> None:
    _, s = disagg_run
    assert s["cluster"]["num_replicas"] == 3
    assert [r["role"] for r in s["replicas"]] == ["prefill", "decode", "decode"]
    d = s["cluster"]["disaggregation"]
    assert (d["prefill_replicas"], d["decode_replicas"], d["decode_router"]) == (1, 2, "least-kv")
    x = d["kv_transfer"]
    assert x["granularity"] == "layer" and x["transfers"] == s["requests"]["completed"] == 80
    assert x["bytes_moved"] == x["blocks_moved"] * x["bytes_per_block_per_gpu"] > 0  # TP 1 on both sides
    for key in ("link_s", "handoff_s"):
        assert 0 < x[key]["p50"] <= x[key]["p99"]
    assert 0 < x["link_busy_share"]["prefill_nics"]["max"] <= 1
    assert d["pools"]["decode"]["requests"]["completed"] == 80


def test_report_and_terminal_table_show_each_replicas_role(disagg_run, capsys, tmp_path) -> None:
    out, s = disagg_run
    html = (out / "report.html").read_text()
    assert "section-error" not in html
    table = html[html.index("<h2>Replicas</h2>"):].split("</table>")[0]
    assert "<th>role</th>" in table and table.count("<td>decode</td>") == 2 and table.count("<td>prefill</td>") == 1
    assert "disaggregated: 1 prefill, 2 decode" in table
    assert "replica 0 (prefill)" in html  # the per-replica figure's legend
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "cluster": {"disaggregation": SPLIT}}))
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--no-report"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("replica ")]
    assert len(lines) == 3 and "prefill, arrived 80" in lines[0] and "decode, arrived" in lines[2]


def test_sweep_varies_the_split_on_the_same_gpus(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "cluster": {"num_replicas": 3, "disaggregation": SPLIT}}))
    grid = ("cluster.disaggregation=null,{prefill_replicas: 1, decode_replicas: 2, kv_transfer: {bandwidth_gbps: 100}},"
            "{prefill_replicas: 2, decode_replicas: 1, kv_transfer: {bandwidth_gbps: 100}}")
    assert main(["sweep", str(path), "--grid", grid, "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    rows = list(csv.DictReader((tmp_path / "sw" / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok"] * 3
    moved = [r.get("cluster.disaggregation.kv_transfer.bytes_moved", "") for r in rows]
    assert moved[0] == "" and int(moved[1]) > 0 and int(moved[2]) > 0  # one pool moves no KV
    assert all(r["requests.completed"] == "80" for r in rows)


def test_the_shipped_scenario_runs_as_one_pool_and_as_splits() -> None:
    from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster

    path = SCENARIOS / "disaggregated.yaml"
    assert path.read_text().startswith("# ")  # its comment says what a user learns
    small = ["workload.num_requests=60"]
    for sets in ([], ["cluster.disaggregation=null"],
                 ["cluster.disaggregation.prefill_replicas=2", "cluster.disaggregation.decode_replicas=6"]):
        sc = load_scenario(path, small + sets)
        assert sc.cluster.num_replicas == 8
        s = summarize_cluster(ClusterSimulation(sc).run())
        assert s["requests"]["completed"] == 60 and len(s["replicas"]) == 8
        assert ("disaggregation" in s["cluster"]) == (not sets or len(sets) == 2)

"""`sim run` of a cluster scenario: its files, its report, its terminal table, bad input,
and ``num_replicas: 1`` being exactly the single-engine run."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from cluster_world import CLUSTER
from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.engine.simulation import Simulation
from sim.errors import ConfigError


def _write(tmp_path, data, name="scenario.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    out = tmp / "out"
    assert main(["run", str(_write(tmp, CLUSTER)), "--out", str(out), "--quiet"]) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_summary_has_todays_keys_a_cluster_block_and_replicas(cluster_run):
    out, s = cluster_run
    single_keys = ["scenario", "model", "gpu", "calibration_source", "calibration_label", "policies", "profile",
                   "notes", "requests", "ttft_s", "tpot_s", "itl_s", "e2e_s", "throughput", "goodput_requests_per_s",
                   "slo", "kv", "memory", "preemptions", "engine"]
    assert list(s) == single_keys + ["cluster", "replicas", "sim_wall_s"]
    assert {k: s["cluster"][k] for k in ("num_replicas", "router", "sticky_sessions")} == {
        "num_replicas": 3, "router": "prefix-aware", "sticky_sessions": True}
    assert "sums" in s["cluster"]["aggregation"]
    assert [r["replica"] for r in s["replicas"]] == [0, 1, 2]
    assert s["requests"]["rejected"] > 0  # prompts over max_model_len
    one_pool = s["kv"]["pool_tokens"] // 3
    assert s["kv"]["pool_tokens"] == 3 * one_pool
    for rep in s["replicas"]:
        assert set(rep) == {"replica", "requests", "peak_running", "kv_peak_used_fraction", "preemptions",
                            "busy_share", "prefix_cache_hit_rate", "ttft_s", "tpot_s", "itl_s"}
        assert 0 < rep["busy_share"] <= 1 and 0 < rep["kv_peak_used_fraction"] <= s["kv"]["peak_used_fraction"]
        assert list(rep["ttft_s"]) == list(rep["tpot_s"]) == list(rep["itl_s"]) == ["p50", "p95", "p99"]
        assert rep["ttft_s"]["p50"] <= rep["ttft_s"]["p95"] <= rep["ttft_s"]["p99"]


def test_requests_csv_gains_a_replica_column_and_steps_csv_leads_with_the_replica(cluster_run):
    out, s = cluster_run
    rows = list(csv.DictReader((out / "requests.csv").open()))
    assert list(rows[0])[:3] == ["request_id", "replica", "session_id"]
    assert [int(r["request_id"]) for r in rows] == list(range(s["requests"]["arrived"]))
    for rep in s["replicas"]:
        mine = [r for r in rows if int(r["replica"]) == rep["replica"]]
        assert len(mine) == rep["requests"]["arrived"]
        assert sum(r["status"] == "rejected" for r in mine) == rep["requests"]["rejected"]
    sessions: dict[str, set[str]] = {}
    for r in rows:
        sessions.setdefault(r["session_id"], set()).add(r["replica"])
    assert all(len(v) == 1 for v in sessions.values())  # sticky
    steps = list(csv.reader((out / "steps.csv").open()))
    assert steps[0][:3] == ["replica", "time_s", "duration_s"]
    per = [sum(1 for row in steps[1:] if row[0] == str(i)) for i in range(3)]
    assert sum(per) == s["engine"]["num_steps"] and min(per) > 0


def test_report_has_a_per_replica_table_and_figure(cluster_run):
    out, s = cluster_run
    html = (out / "report.html").read_text()
    assert "section-error" not in html
    assert "<h2>Replicas</h2>" in html and "table class='summary replicas'" in html
    table = html[html.index("<h2>Replicas</h2>"):].split("</table>")[0]
    assert table.count("<tr>") == 1 + 3
    assert "Replicas: KV use and load" in html
    assert "<th>TTFT p50 / p95 / p99</th>" in table
    p95 = s["replicas"][0]["ttft_s"]["p95"]
    assert f"/ {p95 * 1e3:,.1f} ms /" in table
    assert html.count("Plotly.newPlot") == 3  # replicas, latency CDFs, request timeline


def test_terminal_table_prints_one_line_per_replica(tmp_path, capsys):
    assert main(["run", str(_write(tmp_path, CLUSTER)), "--out", str(tmp_path / "o"), "--no-report"]) == 0
    text = capsys.readouterr().out
    assert "cluster      3 replicas, router prefix-aware" in text
    assert [line.split()[1] for line in text.splitlines() if line.startswith("replica ")] == ["0", "1", "2"]
    assert sum("ttft p50/p95/p99 " in line for line in text.splitlines()) == 3


def _files(out):
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("sim_wall_s")
    return summary, (out / "requests.csv").read_bytes(), (out / "steps.csv").read_bytes()


def test_one_replica_is_byte_identical_to_no_cluster(tmp_path):
    plain = {**CLUSTER}
    del plain["cluster"]
    one = {**CLUSTER, "cluster": {"num_replicas": 1, "router": "least-kv", "sticky_sessions": False}}
    for name, data in (("plain", plain), ("one", one)):
        assert main(["run", str(_write(tmp_path, data, f"{name}.yaml")), "--out", str(tmp_path / name),
                     "--quiet", "--no-report"]) == 0
    assert _files(tmp_path / "plain") == _files(tmp_path / "one")
    assert "replica" not in (tmp_path / "one" / "requests.csv").read_text().splitlines()[0]


@pytest.mark.parametrize(("sets", "key", "says"), [
    (["cluster.num_replicas=0"], "cluster.num_replicas", "greater than 0"),
    (["cluster.num_replicas=100000"], "cluster.num_replicas", "ceiling 256"),
    (["cluster.router=random"], "cluster.router", "least-outstanding"),
    (["cluster.prefix_load_factor=-1"], "cluster.prefix_load_factor", "greater than 0"),
    (["cluster.replicas=2"], "cluster.replicas", "allowed keys"),
])
def test_bad_cluster_input_is_one_line_and_exit_2(tmp_path, capsys, sets, key, says):
    argv = ["run", str(_write(tmp_path, CLUSTER)), "--out", str(tmp_path / "o"), "--quiet", "--no-report"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err
    assert key in err and says in err, err


def test_a_single_engine_simulation_refuses_a_cluster_scenario():
    # sweeps and validation build one engine: they must not silently drop the replicas
    with pytest.raises(ConfigError, match="cluster.num_replicas"):
        Simulation(parse_scenario(CLUSTER, "<test>"))

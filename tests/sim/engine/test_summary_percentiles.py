"""p95 and p99.9 beside mean/p50/p90/p99: in summary.json (numpy's percentile of the finished
requests' latencies, as requests.csv lists them), in the terminal table and in report.html."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml

from sim.cli.main import main
from sim.engine.logs.metrics import PERCENTILES, STAT_KEYS, _stats, stat_label


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_sweep_scenario):
    root = tmp_path_factory.mktemp("pct")
    scenario = root / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny_sweep_scenario))
    out = root / "run"
    assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
    return out


def test_the_statistics_are_mean_then_every_percentile_in_order():
    assert STAT_KEYS == ("mean", "p50", "p90", "p95", "p99", "p999")
    assert PERCENTILES["p95"] == 95 and PERCENTILES["p999"] == 99.9
    assert [stat_label(k) for k in STAT_KEYS] == ["mean", "p50", "p90", "p95", "p99", "p99.9"]
    assert _stats([]) == dict.fromkeys(STAT_KEYS)
    s = _stats(list(range(1001)))  # 0..1000: percentile q is 10 q exactly
    assert (s["p95"], s["p99"], s["p999"]) == pytest.approx((950.0, 990.0, 999.0))


def test_summary_percentiles_are_those_of_the_requests_latencies(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert list(summary[key]) == list(STAT_KEYS)
        values = np.array([float(r[key]) for r in rows if r[key] != ""])
        assert values.size > 10
        for q, pct in PERCENTILES.items():
            assert summary[key][q] == pytest.approx(float(np.percentile(values, pct)), rel=1e-4, abs=1e-6), (key, q)
        s = summary[key]
        assert s["p50"] <= s["p90"] <= s["p95"] <= s["p99"] <= s["p999"] <= values.max()
        assert s["p95"] < s["p999"]  # 50 requests of spread lengths: the tail is not flat


def test_the_terminal_table_and_the_report_show_p95_and_p99_9(tiny_sweep_scenario, tmp_path, capsys):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny_sweep_scenario))
    out = tmp_path / "run"
    assert main(["run", str(scenario), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if "metric" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == ["metric", "mean", "p50", "p90", "p95", "p99", "p99.9"]
    summary = json.loads((out / "summary.json").read_text())
    ttft = next(line for line in printed.splitlines() if "ttft (ms)" in line)
    assert f"{summary['ttft_s']['p95'] * 1e3:,.1f}" in ttft and f"{summary['ttft_s']['p999'] * 1e3:,.1f}" in ttft
    html = (out / "report.html").read_text()
    assert f"p95 {summary['tpot_s']['p95']:.4g}, p99 " in html and f"p99.9 {summary['e2e_s']['p999']:.4g}" in html
    assert "<span>TTFT p50 / p95 / p99</span>" in html

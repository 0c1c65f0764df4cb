"""ITL where a user reads it: ``sim run`` end to end (report on) of one engine, a routed fleet, a
disaggregated cluster and pipeline-parallel engines: summary.json's ``itl_s`` (and each
replica's), the terminal table's row and report.html's card. The gaps' mean is checked against
the requests' own tokens: every finished request's n - 1 gaps add up to its client's last
token less its first, which requests.csv gives as ``tpot_s x (n - 1)``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.engine.logs.metrics import STAT_KEYS

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"

CASES = {
    "one engine": ("chatbot.yaml", ["workload.num_requests=150"]),
    "fleet": ("fleet-router.yaml", ["workload.num_requests=200"]),
    "disaggregated": ("disaggregated.yaml", ["workload.num_requests=150"]),
    "pipeline": ("llama3-70b-pp.yaml", ["workload.num_requests=120"]),
    "pipeline fleet": ("llama3-70b-pp-fleet.yaml", ["workload.num_requests=120"]),
    "virtual engines": ("llama3-70b-pp.yaml", ["workload.num_requests=120", "engine.pipeline_mode=virtual-engines"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_itl_in_summary_table_and_report(case, tmp_path, capsys) -> None:
    name, sets = CASES[case]
    out = tmp_path / "run"
    argv = ["run", str(SCENARIOS / name), "--out", str(out), "--steps", "none"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    itl = summary["itl_s"]
    assert list(itl) == list(STAT_KEYS)
    assert 0 < itl["p50"] <= itl["p90"] <= itl["p95"] <= itl["p99"] <= itl["p999"]
    with open(out / "requests.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["tpot_s"] != ""]
    n = sum(int(r["num_output_tokens"]) - 1 for r in rows)
    total = sum(float(r["tpot_s"]) * (int(r["num_output_tokens"]) - 1) for r in rows)
    assert n > 100
    assert itl["mean"] == pytest.approx(total / n, rel=1e-6)
    row = next(line for line in printed.splitlines() if "itl (ms)" in line)
    assert f"{itl['p99'] * 1e3:,.1f}" in row
    html = (out / "report.html").read_text()
    assert "ITL p50 / p95 / p99" in html and f"p99.9 {itl['p999']:.4g}" in html
    for entry in summary.get("replicas", ()):
        assert set(entry["itl_s"]) == {"p50", "p95", "p99"}
        if entry.get("role") == "prefill":  # a prefill copy makes one token: no gap
            assert entry["itl_s"]["p50"] is None
        elif entry["requests"]["completed"]:
            assert entry["itl_s"]["p50"] > 0
    if case == "disaggregated":  # the second token waits for the KV hand-off: the longest gaps
        handoff = summary["cluster"]["disaggregation"]
        assert handoff and itl["p999"] > itl["p50"]


def test_sim_compare_lists_itl(tmp_path, capsys) -> None:
    runs = []
    for size in (8, 32):
        out = tmp_path / f"b{size}"
        assert main(["run", str(SCENARIOS / "chatbot.yaml"), "--out", str(out), "--no-report", "--quiet",
                     "--set", "workload.num_requests=80", "--set", f"kv.block_size={size}"]) == 0
        runs.append(out)
    capsys.readouterr()
    assert main(["compare", *map(str, runs), "--out", str(tmp_path / "c.html")]) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if "ITL p99 (s)" in line)
    for out in runs:
        p99 = json.loads((out / "summary.json").read_text())["itl_s"]["p99"]
        assert f"{p99:.4g}" in row

"""The calibrated path of docs/guides/calibrate.md, end to end, through the real command lines:

    microbench calibrate --device cpu --quick --model tiny-llama --out cal.yaml
    sim run scenarios/chatbot.yaml --set gpu=cal.yaml            (report on)
    sim sweep scenarios/chatbot.yaml --set gpu=cal.yaml --grid kv.block_size=16,32
    sim compare RUN RUN

Each step's files must exist and carry the measured calibration (its name, ``measured``
and the date of the measurement), never a datasheet's. The calibration is the cheapest
real one: the quick CPU grid on the smallest model, one thread.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from userpath import REPO, check_report, run_cli, summary_of, well_formed

pytest.importorskip("torch")  # microbench times torch on the CPU: `pip install -e '.[gpu]'`

CHATBOT = str(REPO / "scenarios" / "chatbot.yaml")
SMALL = ("--set", "workload.num_requests=40")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> tuple[Path, dict]:
    """A folder of the user's, holding cal.yaml measured just now (and its raw timings)."""
    home = tmp_path_factory.mktemp("user")
    run_cli("microbench", "calibrate", "--device", "cpu", "--quick", "--model", "tiny-llama", "--threads", "1",
            "--no-progress", "--out", "cal.yaml", cwd=home)
    assert (home / "cal.jsonl").is_file()  # the raw timings beside it, for `microbench fit`
    return home, yaml.safe_load((home / "cal.yaml").read_text())


@pytest.fixture(scope="module")
def runs(calibrated) -> list[Path]:
    """Two `sim run`s on the measured calibration (report on), block sizes 16 and 32."""
    home, _ = calibrated
    dirs = []
    for block in (16, 32):
        run_cli("sim", "run", CHATBOT, "--set", "gpu=cal.yaml", *SMALL, "--set", f"kv.block_size={block}",
                "--out", f"runs/b{block}", "--quiet", cwd=home)
        dirs.append(home / "runs" / f"b{block}")
    return dirs


def _carries(summary: dict, cal: dict) -> None:
    assert summary["gpu"] == cal["name"]
    assert summary["calibration_source"] == "measured"
    assert summary["calibration_label"] == f"measured {cal['provenance']['date'][:10]}"


def test_calibrate_writes_a_measured_calibration_of_the_requested_model(calibrated) -> None:
    _, cal = calibrated
    assert cal["source"] == "measured" and cal["schema"] == 2
    assert "tiny-llama" in cal["provenance"]["models"]
    assert {"gemm", "decode_attention", "prefill_attention"} <= set(cal["kernels"])
    assert cal["composition"]["num_records"] > 0  # whole real-engine steps were timed too


def test_sim_run_on_the_measured_calibration_writes_every_file_and_shows_it(runs, calibrated) -> None:
    _, cal = calibrated
    for run in runs:
        summary = summary_of(run)
        _carries(summary, cal)
        assert summary["requests"]["completed"] == 40
        html = check_report(run / "report.html", cal["name"])
        assert f"Fitted kernel models ({len(cal['kernels'])})" in html and "Step composition" in html
        assert cal["gpu_name"] in html and cal["provenance"]["date"] in html  # its provenance, shown
        with (run / "requests.csv").open() as f:
            assert sum(1 for row in csv.DictReader(f) if row["status"] == "finished") == 40


def test_sim_sweep_over_the_measured_calibration(calibrated, runs) -> None:
    home, cal = calibrated
    run_cli("sim", "sweep", CHATBOT, "--set", "gpu=cal.yaml", *SMALL, "--grid", "kv.block_size=16,32",
            "--out", "sweep", "--workers", "1", "--quiet", cwd=home)
    with (home / "sweep" / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["kv.block_size"], r["status"]) for r in sorted(rows, key=lambda r: r["kv.block_size"])] == [
        ("16", "ok"), ("32", "ok")]
    for row in rows:
        assert (row["gpu"], row["calibration_source"]) == (cal["name"], "measured")
    points = sorted((home / "sweep" / "points").glob("*.json"))
    assert len(points) == 2
    # a sweep point is the same simulation as the `sim run` of the same values
    by_block = {r["kv.block_size"]: r for r in rows}
    for block, run in zip(("16", "32"), runs):
        assert float(by_block[block]["ttft_s.p99"]) == pytest.approx(summary_of(run)["ttft_s"]["p99"], rel=1e-5)
    whatif = (home / "sweep" / "whatif.html").read_text(encoding="utf-8")
    assert well_formed(whatif) == [] and whatif.count("plotly.js v") == 1


def test_sim_compare_of_two_measured_runs(calibrated, runs) -> None:
    home, cal = calibrated
    proc = run_cli("sim", "compare", *(str(r.relative_to(home)) for r in runs), "--out", "compare.html", cwd=home)
    assert "b16" in proc.stdout and "b32" in proc.stdout and "throughput (req/s)" in proc.stdout
    html = (home / "compare.html").read_text(encoding="utf-8")
    assert well_formed(html) == [] and html.count("plotly.js v") == 1 and html.count("Plotly.newPlot") == 3
    label = f"measured {cal['provenance']['date'][:10]}"
    assert f"<tr><td>gpu</td><td>{cal['name']}</td><td>{cal['name']}</td></tr>" in html
    assert f"<tr><td>calibration_label</td><td>{label}</td><td>{label}</td></tr>" in html
    assert json.loads((runs[0] / "summary.json").read_text())["policies"]["block_size"] == 16

"""A run offered more than the engine serves says so (issue #42), with the rates and the queue; a run
the engine keeps up with, or a batch job, does not; the table shows the peak running and waiting."""

from __future__ import annotations

import json
from pathlib import Path

from sim.cli.main import main

REPO = Path(__file__).resolve().parents[3]
CHATBOT = str(REPO / "scenarios" / "chatbot.yaml")


def _run(tmp_path: Path, capsys, *sets: str) -> tuple[dict, str]:
    out = tmp_path / "run"
    args = ["run", CHATBOT, "--out", str(out), "--no-report", "--set", "workload.num_requests=600"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return json.loads((out / "summary.json").read_text()), capsys.readouterr().out


def test_an_overloaded_run_says_so(tmp_path: Path, capsys) -> None:
    summary, text = _run(tmp_path, capsys, "workload.arrival.rate=40")
    note = next(n for n in summary["notes"] if n.startswith("overloaded"))
    served = summary["throughput"]["requests_per_s"]
    assert f"the engine served {served:.2f} req/s" in note and "sim plan" in note
    assert f"{summary['engine']['peak_waiting']:,} waiting" in note
    assert "note         overloaded" in text
    assert f"peak {summary['engine']['peak_running']:,} running" in text


def test_a_served_rate_and_a_batch_job_are_not_overloaded(tmp_path: Path, capsys) -> None:
    summary, text = _run(tmp_path, capsys)
    assert not any(n.startswith("overloaded") for n in summary["notes"]) and "overloaded" not in text
    summary, _ = _run(tmp_path / "offline", capsys, "workload.arrival={type: offline}")
    assert not any(n.startswith("overloaded") for n in summary["notes"])

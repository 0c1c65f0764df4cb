"""Every shipped calibration through `sim run` with the report on, as a user would pick it
(``--set gpu=<name>``): the run's files are written and report.html shows the calibration.

The measured ones (a schema-2 file with fitted kernel models and a step composition) once
crashed the report after the simulation, and nothing was written at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from userpath import REPO, check_report, summary_of
from sim.cli.main import main

CALIBRATIONS = sorted(p.stem for p in (REPO / "calibrations").glob("*.yaml"))
MODEL = "qwen2.5-1.5b"  # fits every shipped card (llama-3-8b's weights overflow the 8 GB one)


def test_the_repository_ships_datasheet_and_measured_calibrations() -> None:
    sources = {yaml.safe_load((REPO / "calibrations" / f"{n}.yaml").read_text())["source"] for n in CALIBRATIONS}
    assert len(CALIBRATIONS) >= 9 and sources == {"datasheet", "measured"}


@pytest.mark.parametrize("name", CALIBRATIONS)
def test_sim_run_with_the_report_on_every_shipped_calibration(name: str, tmp_path: Path, capsys) -> None:
    cal = yaml.safe_load((REPO / "calibrations" / f"{name}.yaml").read_text())
    out = tmp_path / "run"
    assert main(["run", str(REPO / "scenarios" / "chatbot.yaml"), "--out", str(out), "--quiet",
                 "--set", f"gpu={name}", "--set", f"model={MODEL}", "--set", "workload.num_requests=40"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert {p.name for p in out.iterdir()} >= {"summary.json", "requests.csv", "steps.csv", "report.html"}
    summary = summary_of(out)
    assert summary["gpu"] == cal["name"] and summary["calibration_source"] == cal["source"]
    assert summary["requests"]["completed"] == 40
    html = check_report(out / "report.html", cal["name"])
    assert cal["gpu_name"] in html
    if cal.get("kernels"):  # a measured calibration: its fitted models and how they compose
        assert f"Fitted kernel models ({len(cal['kernels'])})" in html
        for kernel in cal["kernels"]:
            assert f"<td>{kernel}</td>" in html
        assert ("Step composition" in html) == bool(cal.get("composition"))
        if cal.get("kernel_timing") == "device":  # imported tables: no measurement date, the source named
            assert "measured kernels (imported" in html and "aiconfigurator-core" in html
        else:
            assert "measured " + cal["provenance"]["date"][:10] in html
    else:
        assert "Fitted kernel models" not in html

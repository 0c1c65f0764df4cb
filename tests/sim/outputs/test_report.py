"""report.html: the calibration the run used, shown sensibly; a section that fails to draw
costs neither the rest of the page nor the run's other files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli.main import main
import sim.outputs.report as report

REPO = Path(__file__).resolve().parents[3]
RUN_FILES = {"summary.json", "requests.csv", "steps.csv", "report.html"}


@pytest.fixture()
def scenario(tmp_path, tiny_sweep_scenario):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep_scenario))
    return path


def _run(scenario, out, *sets: str) -> int:
    return main(["run", str(scenario), "--out", str(out), "--quiet", *(a for s in sets for a in ("--set", s))])


def test_a_measured_calibration_shows_its_fits_composition_and_provenance(scenario, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(scenario, out, "gpu=cpu-epyc-2core") == 0
    assert capsys.readouterr().err == ""
    html = (out / "report.html").read_text()
    cal = html[html.index("<summary>Calibration</summary>"):]
    shipped = yaml.safe_load((REPO / "calibrations" / "cpu-epyc-2core.yaml").read_text())
    assert f"<p>cpu-epyc-2core (measured {shipped['provenance']['date'][:10]})</p>" in cal
    assert f"<tr><td>gpu_name</td><td>{shipped['gpu_name']}</td></tr>" in cal
    assert f"Fitted kernel models ({len(shipped['kernels'])})" in cal
    gemm, fit = cal[cal.index("<td>gemm</td>"):].split("</tr>")[0], shipped["kernels"]["gemm"]
    assert f"<td>{fit['cv_mape']:.1%}</td>" in gemm  # its cross-validated error
    assert f"flops_per_s {fit['params']['flops_per_s']:.4g}" in gemm  # and its parameters
    assert "Step composition" in cal and "<tr><td>combine</td><td>sum</td></tr>" in cal
    assert "<tr><td>torch_threads</td><td>1</td></tr>" in cal  # provenance
    assert "axis_values" not in cal and "time_s" not in cal  # the raw grids are not dumped
    assert "section-error" not in html


def test_a_datasheet_calibration_has_no_fitted_section(scenario, tmp_path):
    out = tmp_path / "run"
    assert _run(scenario, out) == 0
    cal = (out / "report.html").read_text().split("<summary>Calibration</summary>")[1]
    assert "<p>a100-80gb (datasheet)</p>" in cal and "<tr><td>schema</td><td>1</td></tr>" in cal
    assert "Fitted kernel models" not in cal and "Step composition" not in cal


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


@pytest.mark.parametrize("section, title", [("_timeline_figure", "request timeline"),
                                            ("_memory_figure", "KV memory"),
                                            ("_calibration_html", "calibration")])
def test_a_failing_section_is_an_error_box_and_the_run_is_written(scenario, tmp_path, capsys, monkeypatch,
                                                                  section, title):
    monkeypatch.setattr(report, section, _boom)
    out = tmp_path / "run"
    assert _run(scenario, out) == 0
    assert {p.name for p in out.iterdir()} == RUN_FILES
    assert json.loads((out / "summary.json").read_text())["requests"]["completed"] == 50
    err = capsys.readouterr().err
    assert err == f"warning: report.html: the {title} section failed: RuntimeError: boom\n"
    html = (out / "report.html").read_text()
    assert html.count("section-error") == 1 and f"The {title} section could not be drawn" in html
    plots = 5 - (section != "_calibration_html")
    assert html.count("Plotly.newPlot") == plots and html.count("plotly.js v") == 1  # inlined once, always
    assert "<h2>Summary</h2>" in html


def test_a_report_that_fails_as_a_whole_still_leaves_every_file(scenario, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "_render", _boom)
    out = tmp_path / "run"
    assert _run(scenario, out) == 0
    assert {p.name for p in out.iterdir()} == RUN_FILES
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "The whole report section could not be drawn" in html
    assert "RuntimeError: boom" in capsys.readouterr().err


def test_the_front_ends_busy_share_is_a_card_when_there_is_one(scenario, tmp_path):
    served, offline = tmp_path / "served", tmp_path / "offline"
    assert _run(scenario, served, "engine.profile=vllm-v1", "engine.api_servers=2") == 0
    assert _run(scenario, offline, "engine.profile=vllm-v1", "engine.entrypoint=offline") == 0
    share = json.loads((served / "summary.json").read_text())["engine"]["frontend_busy_share"]
    assert 0 < share <= 1
    assert f"<b>{share:.0%}</b><span>front end busy (2 API servers)</span>" in (served / "report.html").read_text()
    assert "front end busy" not in (offline / "report.html").read_text()

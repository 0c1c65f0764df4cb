"""`sim compare DIR DIR ...`: a table of key numbers per run and compare.html."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli.main import main


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, tiny_sweep_scenario):
    root = tmp_path_factory.mktemp("runs")
    scenario = root / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny_sweep_scenario))
    dirs = []
    for allocator in ("contiguous-static", "paged"):
        out = root / allocator
        assert main(["run", str(scenario), "--out", str(out), "--quiet", "--no-report",
                     "--set", f"kv.allocator={allocator}"]) == 0
        dirs.append(out)
    return dirs


def test_compare_prints_a_column_per_run_and_writes_html(two_runs, tmp_path, capsys):
    out = tmp_path / "compare.html"
    assert main(["compare", *map(str, two_runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "contiguous-static" in printed and "paged" in printed and "throughput (req/s)" in printed
    html = out.read_text()
    assert html.count("plotly.js v") == 1 and html.count("Plotly.newPlot") == 3
    waste = [json.loads((d / "summary.json").read_text())["kv"]["mean_allocated_unused_fraction"]
             for d in two_runs]
    assert f"{waste[0]:.4g}" in html and f"{waste[1]:.4g}" in html


def test_same_folder_names_are_labelled_by_path(two_runs, tmp_path, capsys):
    assert main(["compare", str(two_runs[0]), str(two_runs[0]) + "/", "--out",
                 str(tmp_path / "c.html"), "--quiet"]) == 0


def test_a_folder_without_summary_exits_2(two_runs, tmp_path, capsys):
    assert main(["compare", str(two_runs[0]), str(tmp_path), "--out", str(tmp_path / "c.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "summary.json" in err and err.count("\n") == 1

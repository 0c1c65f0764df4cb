"""`sim sweep`'s terminal table and results.csv: p95 and p99.9 columns, `--sort-by` (alias
`--metric`) picking the ranked column."""

from __future__ import annotations

import csv
import io

import pytest
import yaml

from sim.cli.main import main
from sim.sweep.table import SORT_METRICS

GRID = ["kv.block_size=8,16,32", "scheduler.preemption=recompute,swap"]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, tiny_sweep_scenario):
    path = tmp_path_factory.mktemp("sw") / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep_scenario))
    return str(path)


def _sweep(scenario, out, *extra) -> int:
    argv = ["sweep", scenario, "--out", str(out), "--workers", "1"]
    for g in GRID:
        argv += ["--grid", g]
    return main(argv + list(extra))


def _rows(out, once: bool = False) -> list[dict]:
    """results.csv's rows; ``once``: a group of identical points as its first point only."""
    rows = list(csv.DictReader(io.StringIO((out / "results.csv").read_text())))
    return [r for r in rows if r["identical_to"] in ("", r["point_id"])] if once else rows


def _table_rows(printed: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│ ").split("│")] for line in printed.splitlines()
            if line.startswith("│")]


def test_results_csv_has_p95_and_p99_9_of_every_latency(scenario, tmp_path, capsys):
    assert _sweep(scenario, tmp_path / "sw", "--quiet") == 0
    rows = _rows(tmp_path / "sw")
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        cols = [c for c in rows[0] if c.startswith(key + ".")]
        assert cols == [f"{key}.{q}" for q in ("mean", "p50", "p90", "p95", "p99", "p999")]
        for r in rows:
            assert float(r[f"{key}.p90"]) <= float(r[f"{key}.p95"]) <= float(r[f"{key}.p99"]) <= float(r[f"{key}.p999"])


@pytest.mark.parametrize(("flag", "metric", "label"), [("--sort-by", "ttft_s.p95", "TTFT p95 ms"),
                                                       ("--metric", "ttft_s.p95", "TTFT p95 ms"),
                                                       ("--metric", "itl_s.p99", "ITL p99 ms")])
def test_sort_by_a_latency_ranks_lowest_first_and_shows_the_column(scenario, tmp_path, capsys, flag, metric, label):
    out = tmp_path / "sw"
    assert _sweep(scenario, out, flag, metric) == 0
    printed = capsys.readouterr().out
    assert f"the best 3 of 6 points by {label} (lower is better)" in printed
    header = next(line for line in printed.splitlines() if "block_size" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")][:4] == ["#", "block_size", "preemption", label]
    shown = [float(r[3]) for r in _table_rows(printed)]
    best3 = sorted(float(r[metric]) * 1e3 for r in _rows(out, once=True))[:3]
    assert shown == pytest.approx(best3, abs=0.006) and shown == sorted(shown)


def test_sort_by_a_throughput_ranks_highest_first(scenario, tmp_path, capsys):
    out = tmp_path / "sw"
    assert _sweep(scenario, out, "--sort-by", "throughput.output_tokens_per_s") == 0
    printed = capsys.readouterr().out
    assert "by output tok/s (higher is better)" in printed
    shown = [float(r[3].replace(",", "")) for r in _table_rows(printed)]
    best3 = sorted((float(r["throughput.output_tokens_per_s"]) for r in _rows(out, once=True)), reverse=True)[:3]
    assert shown == pytest.approx(best3, abs=0.006)


def test_the_default_ranking_is_goodput_as_before(scenario, tmp_path, capsys):
    assert _sweep(scenario, tmp_path / "sw") == 0
    assert "points by goodput (req/s)" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["ttft_s.p98", "ttft", "status", ""])
def test_an_unknown_sort_column_is_one_error_line_before_anything_runs(scenario, tmp_path, capsys, bad):
    assert _sweep(scenario, tmp_path / "sw", "--sort-by", bad) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: <cli>: --sort-by: ") and repr(bad) in err
    assert "allowed: goodput_requests_per_s" in err and "{ttft_s,tpot_s,itl_s,e2e_s}.{mean,p50,p90,p95,p99,p999}" in err
    assert not (tmp_path / "sw").exists()


def test_every_sort_metric_is_a_results_column(scenario, tmp_path, capsys):
    assert _sweep(scenario, tmp_path / "sw", "--quiet") == 0
    cols = set(_rows(tmp_path / "sw")[0])
    assert set(SORT_METRICS) <= cols

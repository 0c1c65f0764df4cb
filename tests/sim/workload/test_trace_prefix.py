"""A trace's prefix identity (prefix_group, prefix_tokens): requests of a group share the first
prefix_tokens tokens of their prompts, so prefix caching finds them; a trace without the columns
says that prefix caching has nothing to find."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation


def _trace(path: Path, rows: list[tuple], prefix: bool = True) -> Path:
    head = ["arrived_at", "num_prefill_tokens", "num_decode_tokens"] + (["prefix_group", "prefix_tokens"] if prefix else [])
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows([r if prefix else r[:3] for r in rows])
    return path


def _scenario(trace: Path, caching: bool = True):
    return parse_scenario({"name": "t", "model": "llama-3-8b", "gpu": "a100-80gb", "kv": {"prefix_caching": caching},
                           "workload": {"trace": {"path": str(trace)}}}, str(trace.parent / "s.yaml"))


ROWS = [(0.5 * i, 1000 + 37 * i, 20, (i % 3) + 1 if i % 4 else 0, 640 if i % 4 else 0) for i in range(24)]


def test_a_group_s_requests_share_its_prefix_and_hit_the_cache(tmp_path: Path) -> None:
    result = Simulation(_scenario(_trace(tmp_path / "t.csv", ROWS))).run()
    s = summarize(result)
    assert s["requests"]["completed"] == 24
    prompts = sorted(result.requests.columns(("num_prompt_tokens",))["num_prompt_tokens"].tolist())
    assert prompts == sorted(float(r[1]) for r in ROWS)  # the prompt is the trace's, prefix included
    hit = s["kv"]["prefix_cache_hit_tokens"]
    grouped = [r for r in ROWS if r[3]]
    firsts = {r[3] for r in grouped}  # the first of each group misses; the others hit its 640 tokens (40 blocks)
    assert hit == (len(grouped) - len(firsts)) * 640
    assert not any("no prefix identity" in n for n in s["notes"])


def test_without_the_columns_nothing_is_shared_and_the_run_says_so(tmp_path: Path) -> None:
    s = summarize(Simulation(_scenario(_trace(tmp_path / "t.csv", ROWS, prefix=False))).run())
    assert s["kv"]["prefix_cache_hit_tokens"] == 0
    assert any(n.startswith("the trace t.csv has no prefix identity") for n in s["notes"])
    off = summarize(Simulation(_scenario(_trace(tmp_path / "u.csv", ROWS, prefix=False), caching=False)).run())
    assert not any("no prefix identity" in n for n in off["notes"])  # nothing to say without prefix caching


@pytest.mark.parametrize("rows,header,key,text", [
    ([(0, 100, 10, 1, 100)], None, "line 2, column prefix_tokens", "less than num_prefill_tokens"),
    ([(0, 100, 10, 1.5, 10)], None, "line 2, column prefix_group", "not an integer"),
    ([(0, 100, 10, 1)], ["arrived_at", "num_prefill_tokens", "num_decode_tokens", "prefix_group"],
     "prefix_tokens", "needs both"),
])
def test_bad_prefix_columns_are_one_line(tmp_path: Path, capsys, rows, header, key, text) -> None:
    path = tmp_path / "bad.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header or ["arrived_at", "num_prefill_tokens", "num_decode_tokens", "prefix_group", "prefix_tokens"])
        w.writerows(rows)
    (tmp_path / "s.yaml").write_text(f"name: t\nmodel: llama-3-8b\ngpu: a100-80gb\nworkload:\n  trace: {{path: {path}}}\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: {key}: " in err[0] and text in err[0], err


def test_a_group_of_one_row_and_rows_without_a_group_replay_as_before(tmp_path: Path) -> None:
    rows = [(0.2 * i, 500 + i, 30, 0, 0) for i in range(10)]
    with_cols = Simulation(_scenario(_trace(tmp_path / "a.csv", rows))).run()
    without = Simulation(_scenario(_trace(tmp_path / "b.csv", rows, prefix=False))).run()
    cols = ("first_token_s", "finish_s", "num_prompt_tokens")
    a, b = with_cols.requests.columns(cols), without.requests.columns(cols)
    assert all(np.array_equal(a[c], b[c]) for c in cols)

"""A trace's tree of prompts (prefix_parent, prefix_tokens): a row's prompt begins with the
first prefix_tokens tokens of an earlier row's, so prefix caching finds the blocks they share,
through the parent's own tokens and its parent's, and nothing past them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation

HEAD = ["arrived_at", "num_prefill_tokens", "num_decode_tokens", "prefix_parent", "prefix_tokens"]


def _trace(path: Path, rows, head=HEAD) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(rows)
    return path


def _run(trace: Path):
    sc = parse_scenario({"name": "t", "model": "llama-3-8b", "gpu": "a100-80gb",
                         "kv": {"prefix_caching": True, "block_size": 16},
                         "workload": {"trace": {"path": str(trace)}}}, str(trace.parent / "s.yaml"))
    return Simulation(sc).run()


# (prompt tokens, parent row, prefix tokens); rows 10 s apart: each is done before the next
TREE = [
    (100, 0, 0),   # 1: a root
    (120, 1, 70),  # 2: row 1's first 70 tokens, then its own
    (150, 2, 90),  # 3: row 2's first 90: row 1's 70 and row 2's own 20
    (60, 1, 59),   # 4: row 1's first 59
    (200, 3, 149),  # 5: row 3's first 149, deep in the tree
    (50, 0, 0),    # 6: another root: shares nothing
    (80, 2, 40),   # 7: row 2's first 40 (row 1's, through row 2)
]


def test_rows_hit_what_they_share_with_their_parent_s_line(tmp_path: Path) -> None:
    result = _run(_trace(tmp_path / "t.csv", [(10.0 * i, p, 5, parent, k) for i, (p, parent, k) in enumerate(TREE)]))
    rows = result.requests.columns(("num_cached_tokens", "num_prompt_tokens", "prefix_len"))
    assert rows["num_prompt_tokens"].tolist() == [p for p, _, _ in TREE]  # the prompt is the trace's
    assert rows["prefix_len"].tolist() == [k for _, _, k in TREE]
    # every shared full block is found (16 tokens each), none past the shared tokens
    assert rows["num_cached_tokens"].tolist() == [k // 16 * 16 for _, _, k in TREE]
    s = summarize(result)
    assert s["kv"]["prefix_cache_hit_tokens"] == sum(k // 16 * 16 for _, _, k in TREE)
    assert not any("no prefix identity" in n for n in s["notes"])


def test_a_parent_s_own_tokens_are_found_while_it_still_runs(tmp_path: Path) -> None:
    # row 2 arrives while row 1 decodes its long answer: row 1's prompt blocks are cached already
    result = _run(_trace(tmp_path / "t.csv", [(0.0, 640, 400, 0, 0), (0.5, 700, 5, 1, 640)]))
    cached = result.requests.columns(("num_cached_tokens",))["num_cached_tokens"].tolist()
    assert cached == [0, 640]


@pytest.mark.parametrize("rows,head,key,text", [
    ([(0, 100, 10, 1, 10)], HEAD, "line 2, column prefix_parent", "earlier data row"),
    ([(0, 100, 10, 0, 0), (1, 100, 10, 1, 100)], HEAD, "line 3, column prefix_tokens", "less than num_prefill"),
    ([(0, 50, 10, 0, 0), (1, 100, 10, 1, 60)], HEAD, "line 3, column prefix_tokens", "parent row's"),
    ([(0, 50, 10, 0, 0, 0), (1, 100, 10, 1, 2, 20)], HEAD[:3] + ["prefix_parent", "prefix_group", "prefix_tokens"],
     "line 3, column prefix_parent", "not both"),
    ([(0, 50, 10, 0)], HEAD[:4], "prefix_tokens", "needs both"),
])
def test_bad_parent_cells_are_one_line(tmp_path: Path, capsys, rows, head, key, text) -> None:
    path = _trace(tmp_path / "bad.csv", rows, head)
    (tmp_path / "s.yaml").write_text(f"name: t\nmodel: llama-3-8b\ngpu: a100-80gb\nworkload:\n  trace: {{path: {path}}}\n")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "o"), "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: {key}: " in err[0] and text in err[0], err

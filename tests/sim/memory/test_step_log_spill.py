"""A step log that spills its rows to disk (sim/engine/logs/step_log.py) reads back exactly the
steps it was given, and the run's outputs do not change beyond float round-off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sim.engine.logs.step_log as step_log
from sim.config.scenario import load_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation
from sim.engine.logs.step_log import COLUMNS, StepLog, step_aggregates
from sim.outputs.files import steps_csv

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _run(spill_rows: int | None, monkeypatch):
    if spill_rows is not None:
        monkeypatch.setattr(step_log, "SPILL_ROWS", spill_rows)
    sc = load_scenario(SCENARIOS / "chatbot.yaml", ["workload.num_requests=300"])
    result = Simulation(sc).run()
    monkeypatch.undo()
    return result


def _close(a, b, path="") -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), path
    else:
        assert a == b, path


def test_a_spilled_log_reads_back_every_step_and_summarises_the_same(monkeypatch) -> None:
    whole = _run(None, monkeypatch)
    spilled = _run(997, monkeypatch)  # an odd size: pieces end mid-way through everything
    a, b = whole.steps, spilled.steps
    assert not a.spilled and b.spilled and len(a) == len(b) > 3 * 997
    assert (a.table() == b.table()).all()
    assert (a.table(1000, 2500) == b.table(1000, 2500)).all()  # across a piece boundary
    assert a.row(1500) == b.row(1500) and a.row(len(a) - 1) == b.row(len(b) - 1)
    assert [type(v) for v in a.row(1500)] == [type(v) for v in b.row(1500)]  # counts as ints either way
    for name, col in a.array().items():
        assert (col == b.array()[name]).all(), name
    assert steps_csv(a) == steps_csv(b) and steps_csv(a, 500) == steps_csv(b, 500)
    pieces = list(b.chunks(700))
    assert sum(p["time_s"].size for p in pieces) == len(b)
    assert (np.concatenate([p["duration_s"] for p in pieces]) == a.array()["duration_s"]).all()
    s_whole, s_spilled = summarize(whole), summarize(spilled)
    for s in (s_whole, s_spilled):
        s.pop("sim_wall_s")
    _close(s_whole, s_spilled)


def test_aggregates_of_a_log_that_never_spilled_are_the_plain_sums(monkeypatch) -> None:
    log = _run(None, monkeypatch).steps
    cols, pool = log.array(), 10_000_000
    agg = step_aggregates(log, pool)
    dur = cols["duration_s"]
    assert agg["busy"] == dur.sum() and agg["num_steps"] == len(log)
    assert agg["token"] == (cols["kv_token_slots"] * dur).sum()
    assert agg["free"] == ((pool - cols["kv_allocated_slots"] - cols["kv_external_frag_slots"]) * dur).sum()
    assert agg["peak_running"] == cols["num_running"].max()


def test_condensed_rows_keep_time_weighted_means_and_totals(monkeypatch) -> None:
    log = _run(997, monkeypatch).steps
    cols = log.array()
    small = log.condensed(max_rows=300)
    k = -(-len(log) // 300)
    assert small["time_s"].size == -(-len(log) // k) <= 300
    assert small["time_s"][-1] == cols["time_s"][-1]
    assert small["duration_s"].sum() == pytest.approx(cols["duration_s"].sum(), rel=1e-12)
    assert small["num_preempted"].sum() == cols["num_preempted"].sum()
    dur = cols["duration_s"]
    for name in ("kv_allocated_slots", "num_running", "num_decode_tokens"):
        want = (cols[name] * dur).sum()
        got = (small[name] * small["duration_s"]).sum()
        assert got == pytest.approx(want, rel=1e-9), name
    assert log.condensed(max_rows=10 ** 9)["time_s"].size == len(log)  # fits: the log itself


def test_counts_widen_to_64_bits_after_a_spill(monkeypatch) -> None:
    monkeypatch.setattr(step_log, "SPILL_ROWS", 4)
    log = StepLog()
    rows = [(float(i), 0.5, *([i] * 8), 0.0, *([i] * 6)) for i in range(6)]
    rows.append((6.0, 0.5, *([1] * 8), 3e9, 2**40, *([1] * 5)))  # a huge pool's count, and bytes
    for r in rows:
        log.append(*r)
    assert log.spilled and len(log) == 7
    table = log.table()
    assert table.shape == (7, len(COLUMNS))
    assert table[6, COLUMNS.index("kv_token_slots")] == 2**40 and table[6, COLUMNS.index("swap_bytes")] == 3e9
    assert [log.row(i)[0] for i in range(7)] == [float(i) for i in range(7)]
    assert table[3, COLUMNS.index("num_seqs")] == 3

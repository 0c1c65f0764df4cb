"""The step log: doubles for the times and swap bytes, 32-bit counts (64-bit past 2**31),
read as columns, as tuples (``rows``) and sampled evenly for ``sim run --steps sampled``."""

from __future__ import annotations

import numpy as np

from sim.engine.logs.metrics import COLUMNS, StepLog


def _log(n: int) -> StepLog:
    log = StepLog()
    for i in range(n):
        log.append(i * 0.5, 0.25, *range(i, i + len(COLUMNS) - 2))
    return log


def test_rows_are_tuples_with_integer_counts_and_columns_are_float_arrays() -> None:
    log = _log(5)
    assert len(log) == len(log.rows) == 5
    assert log.rows[-1] == (2.0, 0.25, *range(4, 4 + len(COLUMNS) - 2))
    assert all(type(v) is int for v in log.rows[0][2:])
    assert list(log.rows)[1] == log.rows[1] and log.rows[1:3] == [log.rows[1], log.rows[2]]
    cols = log.array()
    assert list(cols) == list(COLUMNS) and cols["num_seqs"].tolist() == [0, 1, 2, 3, 4]
    log.append(*range(len(COLUMNS)))  # the log grows on after a read
    assert len(log) == 6 and cols["time_s"].size == 5
    assert log.table()[-1].tolist() == list(range(len(COLUMNS)))


def test_counts_past_32_bits_widen_the_log_and_keep_every_value() -> None:
    log = _log(3)
    big = 3 * 2**31 + 7  # a pool of more than 2**31 slots
    log.append(9.0, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 2**40, big, big + 1, 0, 0, 0, 0)
    log.append(9.5, 0.5, *range(len(COLUMNS) - 2))
    assert len(log) == 5 and log.rows[3][10:13] == (2**40, big, big + 1)
    assert log.rows[:3] == _log(3).rows[:3] and log.rows[4][2:] == tuple(range(len(COLUMNS) - 2))
    assert log.array()["kv_token_slots"].tolist()[3] == big


def test_rows_appended_at_once_keep_every_value_and_widen_when_one_needs_it() -> None:
    """``append_rows`` (macro-steps' batches of rows, packed with struct) keeps each value as given."""
    width = len(COLUMNS) - 3
    rows = [(0.1 * i, 1 / 3, 2.0**53 if i == 2 else 4096.0 * i, *range(i - 5, i - 5 + width)) for i in range(6)]
    rows[4] = (*rows[4][:3], 2**35, *rows[4][4:])  # past 32 bits in the middle of a batch
    expected = [(t, d, *counts[:8], int(swap), *counts[8:]) for t, d, swap, *counts in rows]  # COLUMNS order
    batch = StepLog()
    batch.append_rows([v for r in rows[:3] for v in r[:3]], [v for r in rows[:3] for v in r[3:]])
    batch.append_rows(tuple(v for r in rows[3:] for v in r[:3]), tuple(v for r in rows[3:] for v in r[3:]))
    got = batch.rows[:]
    assert got == expected and [type(v) for v in got[4]] == [type(v) for v in expected[4]]
    assert batch.array()["num_seqs"].tolist() == [-5, -4, -3, -2, 2**35, 0]


def test_an_empty_log_has_empty_columns() -> None:
    cols = StepLog().array()
    assert all(v.size == 0 for v in cols.values()) and StepLog().sample_indices(10).size == 0


def test_sampling_keeps_every_kth_step_from_the_first_and_at_most_max_rows() -> None:
    log = _log(1003)
    assert log.sample_indices(None).tolist() == list(range(1003))
    assert log.sample_indices(5000).tolist() == list(range(1003))
    for cap in (1, 7, 100, 1002):
        idx = log.sample_indices(cap)
        k = -(-1003 // cap)
        assert idx.size <= cap and idx[0] == 0 and np.all(np.diff(idx) == k)

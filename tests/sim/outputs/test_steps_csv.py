"""steps.csv is written in chunks; the chunking never changes a byte, sampled or not."""

from __future__ import annotations

from sim.engine.logs.metrics import COLUMNS, StepLog
from sim.outputs.files import steps_csv, steps_csv_chunks


def _log(n: int) -> StepLog:
    log = StepLog()
    for i in range(n):
        log.append(i / 3, 1e-3 * (i % 7), *(i * 1000 + j for j in range(len(COLUMNS) - 2)))
    return log


def test_chunks_and_sampling_keep_the_rows_and_their_format() -> None:
    log = _log(103)
    whole = steps_csv(log).splitlines()
    assert whole[0] == ",".join(COLUMNS) and len(whole) == 104
    assert whole[2] == "0.333333,0.001," + ",".join(str(1000 + j) for j in range(len(COLUMNS) - 2))
    for chunk in (1, 5, 64, 1000):
        assert "".join(steps_csv_chunks(log, chunk=chunk)).splitlines() == whole
        for cap in (1, 7, 50, 103):
            k = log.sample_stride(cap)
            sampled = "".join(steps_csv_chunks(log, cap, chunk=chunk)).splitlines()
            assert sampled == [whole[0], *whole[1::k]] and len(sampled) - 1 <= cap


def test_an_empty_log_is_a_header() -> None:
    assert steps_csv(StepLog()) == ",".join(COLUMNS) + "\n"

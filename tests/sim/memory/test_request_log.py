"""Finished and rejected requests retired into the run's request log (sim/engine/logs/request_log.py)
give exactly the outputs of keeping every request as an object."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.config.scenario import load_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.logs.request_log import FIELDS, RequestLog, SessionId, Tally, request_columns
from sim.engine.simulation import Simulation
from sim.outputs.files import requests_csv
from sim.request import RequestStatus

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def _run(name: str, keep: bool, extra=()):
    sc = load_scenario(SCENARIOS / name, list(extra))
    sim = Simulation(sc, keep_requests=keep)
    result = sim.run()
    summary = summarize(result)
    summary.pop("sim_wall_s")
    return sim, result, summary


CASES = [
    ("chatbot.yaml", ["workload.num_requests=300"]),  # vllm-v1: front end, prefix caching, chunked prefill
    ("chatbot.yaml", ["workload.num_requests=60",  # conversations: follow-ups after retirement
                      "workload.conversation={turns: {type: fixed, value: 3}, think_time_s: 2.0}"]),
    # a small pool that rejects when full: rejections retired at once, with their reasons
    ("chatbot.yaml", ["workload.num_requests=300", "engine.num_gpu_blocks_override=1200",
                      "scheduler.when_kv_full=reject", "workload.arrival.rate=40"]),
]


@pytest.mark.parametrize("name,extra", CASES)
def test_retiring_requests_changes_no_output(name, extra) -> None:
    sim, result, summary = _run(name, keep=False, extra=extra)
    _, kept, summary0 = _run(name, keep=True, extra=extra)
    assert summary == summary0
    assert requests_csv(result.requests) == requests_csv(kept.requests)
    log = result.requests
    assert isinstance(log, RequestLog) and log.num_live == 0  # a drained run keeps no request object
    # the scheduler counted what it did not keep
    assert len(sim.scheduler.finished) == summary["requests"]["completed"]
    assert len(sim.scheduler.rejected) == summary["requests"]["rejected"]
    with pytest.raises(TypeError):
        list(sim.scheduler.finished)


def test_the_rejecting_case_rejects_and_retired_requests_read_back_as_they_were() -> None:
    _, result, summary = _run(CASES[2][0], False, CASES[2][1])
    _, kept, _ = _run(CASES[2][0], True, CASES[2][1])
    assert summary["requests"]["rejected"] > 0  # the case exercises rejections
    for revived, orig in zip(result.requests, kept.requests):
        for name in FIELDS:
            if name == "session_id":
                assert revived.session.session_id == orig.session.session_id
            elif name not in ("status",):
                assert getattr(revived, name) == getattr(orig, name), name
        assert revived.status is orig.status
        assert isinstance(revived.session, SessionId) and revived.prompt_segments == ()


def test_columns_of_a_log_match_columns_of_the_objects() -> None:
    _, result, _ = _run(CASES[1][0], False, CASES[1][1])
    _, kept, _ = _run(CASES[1][0], True, CASES[1][1])
    a, reasons_a = request_columns(result.requests)
    b, reasons_b = request_columns(list(kept.requests))
    assert reasons_a == reasons_b
    for name in FIELDS:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_log_mixes_live_and_retired_requests(make_request) -> None:
    log = RequestLog()
    reqs = [make_request(i, 10 + i, output=5) for i in range(4)]
    for r in reqs:
        log.append(r)
    reqs[1].status, reqs[1].finish_s, reqs[1].first_token_s, reqs[1].last_token_s = (
        RequestStatus.FINISHED, 2.0, 1.0, 2.0)
    reqs[2].status, reqs[2].reject_reason = RequestStatus.REJECTED, "prompt_too_long"
    log.retire(reqs[1])
    log.retire(reqs[2])
    log.retire(reqs[2])  # twice: no second row
    assert log.num_live == 2 and len(log) == 4
    assert log[0] is reqs[0] and log[-1] is reqs[3]
    assert log[1] is not reqs[1] and log[1].finish_s == 2.0 and log[1].admitted_s is None
    assert log[2].reject_reason == "prompt_too_long" and log[2].status is RequestStatus.REJECTED
    cols = log.columns(("num_prompt_tokens", "reject_reason"))
    assert cols["num_prompt_tokens"].tolist() == [10, 11, 12, 13]
    assert cols["reject_reason"].tolist() == [-1, -1, 0, -1] and log.reasons() == ["prompt_too_long"]
    part = log.columns(("num_prompt_tokens", "finish_s"), 0, 2)  # a range: one live, one retired
    assert part["num_prompt_tokens"].tolist() == [10, 11] and part["finish_s"][1] == 2.0
    assert np.isnan(part["finish_s"][0])
    cols_part, _ = request_columns(reqs, ("num_prompt_tokens",), 2, 4)  # a list of objects too
    assert cols_part["num_prompt_tokens"].tolist() == [12, 13]
    with pytest.raises(ValueError):
        log.append(make_request(9, 5))  # ids are positions: a gap is a bug
    with pytest.raises(IndexError):
        log[4]


def test_a_tally_counts_and_forwards() -> None:
    got = []
    t = Tally(got.append)
    t.append("a")
    t.append("b")
    assert len(t) == 2 and got == ["a", "b"]


def test_requests_csv_in_small_pieces_is_the_same_file() -> None:
    """requests.csv reads each piece's own columns (not the whole run's at once): pieces of 7
    rows, across rejected and finished requests, give the same bytes as one piece."""
    from sim.outputs.files import requests_csv_chunks

    _, result, summary = _run(CASES[2][0], False, CASES[2][1])
    assert summary["requests"]["rejected"] > 0
    whole = "".join(requests_csv_chunks(result.requests, chunk=1_000_000))
    assert "".join(requests_csv_chunks(result.requests, chunk=7)) == whole
    assert whole.count("\n") == len(result.requests) + 1

"""Closed-loop clients (workload.arrival type closed): a fixed concurrency, as load tests run it."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from sim.config.scenario import parse_scenario
from sim.errors import ConfigError
from sim.outputs.files import requests_csv
from sim.workload.generate import build_workload

CLOSED = {"type": "closed", "concurrency": 3}
LENGTHS = {"prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
           "output_tokens": {"type": "uniform", "low": 1, "high": 40}}


def rows(result) -> list[dict]:
    """requests.csv's rows, each with ``answered_s``: when its client had the answer (the front
    end's last token where the profile has one, else the engine's finish)."""
    out = list(csv.DictReader(io.StringIO(requests_csv(result.requests))))
    for r in out:
        r["answered_s"] = r.get("client_last_s") or r["finish_s"]
    return out


@pytest.mark.parametrize(("think", "profile"), [(0.0, "eager"), (0.05, "eager"), (0.0, "vllm-v1")])
def test_clients_send_their_next_request_after_the_answer(simulate, assert_drained, scenario_dict, think,
                                                          profile) -> None:
    data = scenario_dict(workload={"num_requests": 20, "arrival": {**CLOSED, "think_time_s": think}, **LENGTHS},
                         kv={"prefix_caching": True}, engine={"profile": profile})
    result, summary = simulate(data)
    assert_drained(result, summary)
    assert summary["requests"]["completed"] == 20
    rs = rows(result)
    assert sorted({r["session_id"] for r in rs}) == ["0", "1", "2"]  # 3 clients
    assert sorted(sum(r["session_id"] == s for r in rs) for s in "012") == [6, 7, 7]  # 20 spread over them
    events = []
    for s in "012":
        mine = sorted((r for r in rs if r["session_id"] == s), key=lambda r: int(r["turn"]))
        assert float(mine[0]["arrival_s"]) == 0.0
        for prev, nxt in zip(mine, mine[1:]):  # the next request waits for the answer (and the think time)
            assert float(nxt["arrival_s"]) >= float(prev["answered_s"])
        events += [(float(r["arrival_s"]), 1) for r in mine] + [(float(r["answered_s"]) - 1e-9, -1) for r in mine]
    in_flight = np.cumsum([d for _, d in sorted(events, key=lambda e: (e[0], e[1]))])
    assert in_flight.max() == 3  # never more than the concurrency, and it is reached
    # the requests are independent: no prompt carries an earlier request (a conversation's would)
    assert max(int(r["num_prompt_tokens"]) for r in rs) <= 60
    if think == 0.0 and profile == "eager":  # the next request goes out as the engine answers (no front end)
        for s in "012":
            mine = sorted((r for r in rs if r["session_id"] == s), key=lambda r: int(r["turn"]))
            assert all(float(b["arrival_s"]) == pytest.approx(float(a["answered_s"]), abs=1e-9)
                       for a, b in zip(mine, mine[1:]))


def test_more_clients_than_requests_and_the_workload_arrays(scenario_dict) -> None:
    sc = parse_scenario(scenario_dict(workload={"num_requests": 2, "arrival": {**CLOSED, "concurrency": 5},
                                                **LENGTHS}), "/tmp/kvsim-test/s.yaml")
    sessions = list(build_workload(sc, np.random.default_rng(0)))
    assert [len(s.turns) for s in sessions] == [1, 1] and all(not s.history and s.arrival_s == 0 for s in sessions)


@pytest.mark.parametrize(("workload", "fragment"), [
    ({"duration_s": 10.0}, "needs 'num_requests'"),
    ({"num_requests": 4, "duration_s": 10.0}, "neither 'duration_s'"),
    ({"num_requests": 4, "conversation": {"turns": {"type": "fixed", "value": 2}}}, "nor 'conversation'"),
])
def test_bad_closed_workloads_are_one_error(scenario_dict, workload, fragment) -> None:
    data = scenario_dict(workload={"arrival": CLOSED, **LENGTHS, **workload})
    with pytest.raises(ConfigError) as err:
        parse_scenario(data, "/tmp/kvsim-test/s.yaml")
    assert err.value.key == "workload" and fragment in err.value.message


def test_a_client_sends_at_most_max_turns(scenario_dict) -> None:
    sc = parse_scenario(scenario_dict(workload={"num_requests": 20_002, "arrival": {**CLOSED, "concurrency": 2},
                                                **LENGTHS}), "/tmp/kvsim-test/s.yaml")
    with pytest.raises(ConfigError) as err:
        build_workload(sc, np.random.default_rng(0))
    assert err.value.key == "workload.arrival.concurrency"

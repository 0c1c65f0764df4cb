"""Workload generation: arrivals, lengths, prefixes, conversations and trace replay."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.config.scenario import parse_scenario
from sim.workload.generate import arrival_times, build_workload, sample_lengths


def scenario(scenario_dict, source="/tmp/kvsim-test/s.yaml", **workload):
    wl = {"num_requests": 100, "arrival": {"type": "poisson", "rate": 10.0},
          "prompt_tokens": {"type": "fixed", "value": 10},
          "output_tokens": {"type": "fixed", "value": 5}}
    wl.update(workload)
    return parse_scenario(scenario_dict(workload=wl), source)


def rng(seed=0):
    return np.random.default_rng(seed)


def gaps(times):
    return np.diff(times)


def test_same_seed_same_sessions(scenario_dict) -> None:
    sc = scenario(scenario_dict, prompt_tokens={"type": "lognormal", "median": 50, "sigma": 1.0},
                  shared_prefix={"num_prefixes": 3, "prefix_tokens": 20, "fraction": 0.5},
                  conversation={"turns": {"type": "uniform", "low": 1, "high": 4}})
    a, b = build_workload(sc, rng(7)), build_workload(sc, rng(7))
    assert a == b
    assert build_workload(sc, rng(8)) != a


def test_first_arrival_at_zero_and_sorted(scenario_dict) -> None:
    sc = scenario(scenario_dict)
    times = arrival_times(sc, rng())
    assert times[0] == 0.0 and times.size == 100
    assert (gaps(times) >= 0).all()


def test_poisson_mean_rate(scenario_dict) -> None:
    sc = scenario(scenario_dict, num_requests=20000, arrival={"type": "poisson", "rate": 4.0})
    g = gaps(arrival_times(sc, rng(1)))
    # exponential gaps: mean 1/4, std 1/4; the mean of 19,999 is within 4 sigma of 0.25
    assert g.mean() == pytest.approx(0.25, abs=4 * 0.25 / np.sqrt(g.size))
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.05)  # cv of an exponential is 1


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_cv(scenario_dict, cv) -> None:
    sc = scenario(scenario_dict, num_requests=40000, arrival={"type": "gamma", "rate": 2.0, "cv": cv})
    g = gaps(arrival_times(sc, rng(2)))
    assert g.mean() == pytest.approx(0.5, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.08)


def test_constant_exact_spacing(scenario_dict) -> None:
    sc = scenario(scenario_dict, num_requests=10, arrival={"type": "constant", "rate": 4.0})
    times = arrival_times(sc, rng())
    assert list(times) == [0.25 * i for i in range(10)]  # quarters are exact in binary


def test_duration_cuts_arrivals(scenario_dict) -> None:
    sc = parse_scenario(scenario_dict(workload={
        "duration_s": 5.0, "arrival": {"type": "constant", "rate": 4.0},
        "prompt_tokens": {"type": "fixed", "value": 10}, "output_tokens": {"type": "fixed", "value": 5}}),
        "/tmp/kvsim-test/s.yaml")
    times = arrival_times(sc, rng())
    assert times.size == 20 and times[-1] == 4.75  # 0, 0.25, ..., 4.75; 5.0 is cut
    both = scenario(scenario_dict, num_requests=8, duration_s=5.0, arrival={"type": "constant", "rate": 4.0})
    assert arrival_times(both, rng()).size == 8  # whichever limit comes first


def test_duration_with_poisson_spans_many_chunks(scenario_dict) -> None:
    sc = parse_scenario(scenario_dict(workload={
        "duration_s": 100.0, "arrival": {"type": "poisson", "rate": 50.0},
        "prompt_tokens": {"type": "fixed", "value": 10}, "output_tokens": {"type": "fixed", "value": 5}}),
        "/tmp/kvsim-test/s.yaml")
    times = arrival_times(sc, rng(3))
    assert times.max() < 100.0 and times.max() > 99.0
    assert times.size == pytest.approx(5000, abs=4 * np.sqrt(5000))
    assert (gaps(times) >= 0).all()


def test_length_clipping(scenario_dict) -> None:
    sc = scenario(scenario_dict)
    dist = parse_scenario(scenario_dict(workload={
        "num_requests": 1, "arrival": {"type": "constant", "rate": 1.0},
        "prompt_tokens": {"type": "lognormal", "median": 100, "sigma": 2.0, "min": 50, "max": 120},
        "output_tokens": {"type": "fixed", "value": 500, "max": 64}}), "/tmp/kvsim-test/s.yaml").workload
    x = sample_lengths(dist.prompt_tokens, 5000, rng(), sc)
    assert x.min() == 50 and x.max() == 120  # sigma 2 puts mass far on both sides
    assert x.dtype == np.int64
    assert set(sample_lengths(dist.output_tokens, 10, rng(), sc)) == {64}


def test_uniform_is_inclusive(scenario_dict) -> None:
    sc = scenario(scenario_dict, prompt_tokens={"type": "uniform", "low": 3, "high": 5})
    assert set(sample_lengths(sc.workload.prompt_tokens, 2000, rng(), sc)) == {3, 4, 5}


def test_zipf_stays_in_range_and_favours_small(scenario_dict) -> None:
    sc = scenario(scenario_dict, prompt_tokens={"type": "zipf", "a": 1.2, "min": 5, "max": 50})
    x = sample_lengths(sc.workload.prompt_tokens, 5000, rng(), sc)
    assert x.min() >= 5 and x.max() <= 50
    assert (x == 5).sum() > (x == 50).sum()
    # P(5) = 5^-1.2 / sum_{k=5..50} k^-1.2
    k = np.arange(5, 51, dtype=float)
    p5 = 5**-1.2 / (k**-1.2).sum()
    assert (x == 5).mean() == pytest.approx(p5, abs=4 * np.sqrt(p5 * (1 - p5) / x.size))


def test_empirical_draws_only_values_of_the_column(scenario_dict, tmp_path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("a,b\n1,7\n2,300\n3,42\n4,300\n")
    sc = scenario(scenario_dict, source=str(tmp_path / "s.yaml"),
                  prompt_tokens={"type": "empirical", "path": "lengths.csv", "column": "b"})
    x = sample_lengths(sc.workload.prompt_tokens, 3000, rng(), sc)
    assert set(x) == {7, 42, 300}
    assert (x == 300).mean() == pytest.approx(0.5, abs=0.05)  # 300 appears twice in four


def test_empirical_unknown_column_is_a_config_error(scenario_dict, tmp_path) -> None:
    path = tmp_path / "lengths2.csv"
    path.write_text("a,b\n1,7\n")
    sc = scenario(scenario_dict, source=str(tmp_path / "s.yaml"),
                  prompt_tokens={"type": "empirical", "path": "lengths2.csv", "column": "zzz"})
    with pytest.raises(ConfigError, match="zzz"):
        build_workload(sc, rng())


def trace_scenario(scenario_dict, scenarios_dir, **trace):
    return parse_scenario(scenario_dict(workload={"trace": {"path": "traces/azure_conv_2023.csv", **trace}}),
                          str(scenarios_dir / "x.yaml"))


def test_trace_replay_reads_every_row(scenario_dict, scenarios_dir) -> None:
    path = scenarios_dir / "traces" / "azure_conv_2023.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 19_366
    sessions = build_workload(trace_scenario(scenario_dict, scenarios_dir), rng())
    assert len(sessions) == 19_366
    t0 = float(rows[0]["arrived_at"])
    for i in (0, 1, 1000, 19_365):
        s = sessions[i]
        assert s.arrival_s == pytest.approx(float(rows[i]["arrived_at"]) - t0)
        assert s.turns[0].user_tokens == int(rows[i]["num_prefill_tokens"])
        assert s.turns[0].output_tokens == int(rows[i]["num_decode_tokens"])
        assert s.prefix is None and len(s.turns) == 1


def test_trace_speedup_halves_times(scenario_dict, scenarios_dir) -> None:
    normal = build_workload(trace_scenario(scenario_dict, scenarios_dir), rng())
    fast = build_workload(trace_scenario(scenario_dict, scenarios_dir, speedup=2.0), rng())
    assert len(fast) == len(normal)
    for a, b in zip(normal[::997], fast[::997]):
        assert b.arrival_s == pytest.approx(a.arrival_s / 2)
        assert b.turns == a.turns


def test_trace_cut_by_num_requests_and_duration(scenario_dict, scenarios_dir) -> None:
    data = scenario_dict(workload={"trace": {"path": "traces/azure_conv_2023.csv"},
                                   "duration_s": 60.0, "num_requests": 100000})
    sessions = build_workload(parse_scenario(data, str(scenarios_dir / "x.yaml")), rng())
    assert sessions and all(s.arrival_s < 60.0 for s in sessions)
    full = build_workload(trace_scenario(scenario_dict, scenarios_dir), rng())
    assert len(sessions) == sum(1 for s in full if s.arrival_s < 60.0)
    data = scenario_dict(workload={"trace": {"path": "traces/azure_conv_2023.csv"}, "num_requests": 25})
    assert len(build_workload(parse_scenario(data, str(scenarios_dir / "x.yaml")), rng())) == 25


def test_unsorted_trace_is_a_config_error(scenario_dict, tmp_path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n1.0,5,5\n0.5,5,5\n")
    sc = parse_scenario(scenario_dict(workload={"trace": {"path": str(path)}}), str(tmp_path / "s.yaml"))
    with pytest.raises(ConfigError, match="arrived_at"):
        build_workload(sc, rng())


def test_shared_prefix_fraction_and_ids(scenario_dict) -> None:
    sc = scenario(scenario_dict, num_requests=4000,
                  shared_prefix={"num_prefixes": 3, "prefix_tokens": 20, "fraction": 0.25})
    sessions = build_workload(sc, rng(4))
    with_prefix = [s for s in sessions if s.prefix is not None]
    assert len(with_prefix) / len(sessions) == pytest.approx(0.25, abs=0.03)
    assert {s.prefix for s in with_prefix} == {(1, 20), (2, 20), (3, 20)}
    # user segments never collide with prefix ids or with each other
    firsts = [s.first_segment for s in sessions]
    assert min(firsts) == 4 and len(set(firsts)) == len(firsts)


def test_conversation_turns_and_think_times(scenario_dict) -> None:
    sc = scenario(scenario_dict, num_requests=500,
                  conversation={"turns": {"type": "fixed", "value": 3}, "think_time_s": 2.0})
    sessions = build_workload(sc, rng(5))
    assert all(len(s.turns) == 3 for s in sessions)
    assert all(s.turns[0].think_time_s == 0.0 for s in sessions)
    thinks = np.array([t.think_time_s for s in sessions for t in s.turns[1:]])
    assert thinks.mean() == pytest.approx(2.0, rel=0.1)  # exponential, mean 2, n = 1000
    # each turn has its own segment id: turn k uses first_segment + k
    for a, b in zip(sessions, sessions[1:]):
        assert b.first_segment == a.first_segment + 3

"""The sanity target of kvsim issue #15: N replicas at N times the rate, round-robin, give
each request the latency of one replica at the single rate."""

from __future__ import annotations

import pytest

from cluster_world import run, scenario

N = 4
PER_REPLICA = 1000  # requests each replica serves: 4,000 in the cluster


def _pair(arrival: str, seed: int):
    def sc(n):
        return scenario({"num_replicas": n, "router": "round-robin"}, seed=seed, workload={
            "num_requests": PER_REPLICA * n, "arrival": {"type": arrival, "rate": 10.0 * n}})
    return run(sc(1))[0], run(sc(N))[0]


def test_constant_arrivals_give_each_replica_the_single_engines_stream():
    # Round-robin over a constant stream at N x rate hands every replica a constant stream
    # at the single rate: only the phase differs, so latencies match closely.
    one, many = _pair("constant", seed=1)
    assert many["requests"]["completed"] == N * one["requests"]["completed"]
    assert many["ttft_s"]["p50"] == pytest.approx(one["ttft_s"]["p50"], rel=0.03)
    assert many["tpot_s"]["p50"] == pytest.approx(one["tpot_s"]["p50"], rel=0.02)


@pytest.mark.parametrize("seed", [1, 2])
def test_poisson_at_n_times_the_rate_matches_one_replica(seed):
    # Round-robin over Poisson(N x rate) gives each replica Erlang-N gaps at the single rate:
    # the same mean, less bursty than Poisson. TPOT (set by the batch) matches within noise;
    # TTFT (set by the queue in front of a step) can only be somewhat lower, never higher
    # beyond noise: measured ratios 0.85-0.98 at this load.
    one, many = _pair("poisson", seed)
    assert many["requests"]["completed"] == N * one["requests"]["completed"]
    assert many["tpot_s"]["p50"] == pytest.approx(one["tpot_s"]["p50"], rel=0.05)
    assert 0.75 * one["ttft_s"]["p50"] <= many["ttft_s"]["p50"] <= 1.05 * one["ttft_s"]["p50"]
    # every replica carries its share of the load
    for rep in many["replicas"]:
        assert rep["requests"]["arrived"] == PER_REPLICA
        assert rep["busy_share"] > 0.5

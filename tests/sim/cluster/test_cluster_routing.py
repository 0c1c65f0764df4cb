"""Routers, sticky sessions, accounting, and the cluster's exactness (macro-steps on or off)."""

from __future__ import annotations

import pytest

from pathlib import Path

from cluster_world import run, scenario
from sim.config.scenario import load_scenario
from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster
from sim.outputs.files import requests_csv

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"

CHAT = {"conversation": {"turns": {"type": "uniform", "low": 2, "high": 4}, "think_time_s": 1.0}}


def _sessions_by_replica(result) -> dict[int, set[int]]:
    seen: dict[int, set[int]] = {}
    for req in result.requests:
        seen.setdefault(req.session.session_id, set()).add(result.replica_of[req.request_id])
    return seen


def test_every_request_is_accounted_for_per_replica_and_in_total():
    # prompts up to 2,000 tokens against max_model_len 1,024: some are rejected on arrival
    s, result = run(scenario({"num_replicas": 3, "router": "least-outstanding"}, engine={"max_model_len": 1024},
                             workload={"num_requests": 300, "prompt_tokens": {
                                 "type": "lognormal", "median": 500, "sigma": 0.8, "max": 2000}, **CHAT}))
    total = s["requests"]
    assert total["rejected"] > 0 and total["completed"] > 0
    assert total["arrived"] == len(result.requests) == total["completed"] + total["rejected"] + total["in_flight"]
    assert [r.request_id for r in result.requests] == list(range(total["arrived"]))  # global ids, arrival order
    for key in ("arrived", "completed", "rejected", "in_flight"):
        assert sum(rep["requests"][key] for rep in s["replicas"]) == total[key]
    for i, rep in enumerate(s["replicas"]):
        q = rep["requests"]
        assert q["arrived"] == q["completed"] + q["rejected"] + q["in_flight"] > 0
        assert q["arrived"] == result.replica_of.count(i)
    arrivals = [r.arrival_s for r in result.requests]
    assert arrivals == sorted(arrivals)


@pytest.mark.parametrize("router", ["round-robin", "least-outstanding", "least-kv", "prefix-aware"])
def test_sticky_sessions_keep_a_conversation_on_one_replica(router):
    s, result = run(scenario({"num_replicas": 4, "router": router}, kv={"prefix_caching": True},
                             workload={"num_requests": 200, **CHAT}))
    assert s["requests"]["completed"] == s["requests"]["arrived"] > 400
    assert all(len(replicas) == 1 for replicas in _sessions_by_replica(result).values())
    assert min(rep["requests"]["arrived"] for rep in s["replicas"]) > 0


def test_without_sticky_sessions_round_robin_spreads_a_conversation():
    _, result = run(scenario({"num_replicas": 4, "router": "round-robin", "sticky_sessions": False},
                             workload={"num_requests": 200, **CHAT}))
    assert sum(len(replicas) > 1 for replicas in _sessions_by_replica(result).values()) > 100


def _prefix_world(router: str, load_factor: float = 1.5, prefixes: int = 64, rate: float = 40.0):
    # 64 system prompts of 512 tokens (32K tokens) against 16K-token pools: one replica
    # cannot hold them all, four can if each holds its own quarter.
    return run(scenario({"num_replicas": 4, "router": router, "prefix_load_factor": load_factor},
                        engine={"num_gpu_blocks_override": 1000}, kv={"prefix_caching": True},
                        workload={"num_requests": 1500, "arrival": {"type": "poisson", "rate": rate},
                                  "shared_prefix": {"num_prefixes": prefixes, "prefix_tokens": 512}}))[0]


def test_prefix_aware_routing_hits_the_cache_more_than_round_robin():
    rr, pa = _prefix_world("round-robin"), _prefix_world("prefix-aware")
    assert pa["kv"]["prefix_cache_hit_rate"] > rr["kv"]["prefix_cache_hit_rate"] + 0.1  # measured 0.45 vs 0.22
    assert pa["ttft_s"]["p99"] < rr["ttft_s"]["p99"]  # less prefill work: shorter queues
    assert pa["cluster"]["prefix_routed"] > 1000
    assert rr["cluster"]["prefix_routed"] == 0


def test_prefix_aware_falls_back_to_least_outstanding_under_load():
    # One system prompt for everyone: without the load check every request would follow it
    # to the replica that cached it first.
    greedy = _prefix_world("prefix-aware", load_factor=1e6, prefixes=1, rate=60.0)
    shares = [rep["requests"]["arrived"] / greedy["requests"]["arrived"] for rep in greedy["replicas"]]
    assert max(shares) > 0.9 and greedy["cluster"]["prefix_fallbacks"] == 0
    fair = _prefix_world("prefix-aware", load_factor=1.5, prefixes=1, rate=60.0)
    shares = [rep["requests"]["arrived"] / fair["requests"]["arrived"] for rep in fair["replicas"]]
    assert max(shares) < 0.4 and fair["cluster"]["prefix_fallbacks"] > 0
    assert fair["ttft_s"]["p99"] < greedy["ttft_s"]["p99"] / 2


def _skewed(router: str, tmp_path):
    # 20 requests/s; every 4th is long (800 output tokens): round-robin over 4 replicas sends all
    # of them to replica 0, whose KV pool then thrashes.
    trace = tmp_path / "skew.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{i / 20:.6f},{200 if i % 4 == 0 else 300},{800 if i % 4 == 0 else 50}\n" for i in range(1200)))
    return run(scenario({"num_replicas": 4, "router": router}, engine={"num_gpu_blocks_override": 600},
                        workload={"trace": {"path": str(trace)}, "num_requests": None, "arrival": None,
                                  "prompt_tokens": None, "output_tokens": None}))[0]


def test_least_outstanding_balances_a_skewed_load_better_than_round_robin(tmp_path):
    rr, lo = _skewed("round-robin", tmp_path), _skewed("least-outstanding", tmp_path)
    assert [rep["preemptions"] > 0 for rep in rr["replicas"]] == [True, False, False, False]
    assert lo["ttft_s"]["p99"] < rr["ttft_s"]["p99"] / 4  # measured 0.04 s vs 112 s
    assert lo["ttft_s"]["p50"] < rr["ttft_s"]["p50"] * 1.2
    kv = _skewed("least-kv", tmp_path)
    assert kv["ttft_s"]["p99"] < rr["ttft_s"]["p99"] / 4


@pytest.mark.parametrize("profile", ["vllm-v1", "eager"])  # with and without a front end
def test_macro_steps_change_nothing_in_a_cluster(profile):
    sc = scenario({"num_replicas": 3, "router": "prefix-aware", "sticky_sessions": False},
                  engine={"profile": profile}, kv={"prefix_caching": True},
                  workload={"num_requests": 150, "shared_prefix": {"num_prefixes": 4, "prefix_tokens": 256}, **CHAT})
    fast, slow = ClusterSimulation(sc, macro_steps=True).run(), ClusterSimulation(sc, macro_steps=False).run()

    def trail(res):
        return [(r.request_id, r.arrival_s, r.first_token_s, r.finish_s, r.client_last_s, r.num_cached_tokens)
                for r in res.requests]

    assert trail(fast) == trail(slow)
    assert fast.replica_of == slow.replica_of
    for a, b in zip(fast.replicas, slow.replicas):
        assert a.steps.rows[:] == b.steps.rows[:]


@pytest.mark.parametrize("router", ["least-kv", "least-outstanding", "prefix-aware"])
@pytest.mark.parametrize("profile", ["vllm-v1", "eager"])
def test_single_turn_replicas_step_off_the_clock_until_the_router_next_picks(router, profile, monkeypatch):
    """Without follow-up turns the router's next pick is the next arrival, known ahead: a
    replica's steps run off the clock until then (only the step an arrival or a request
    leaving its front end falls within waits for the clock), with the same results as
    stepping one by one, under routers that read the replicas' load and prefix caches."""
    import simpy

    events = []
    step = simpy.Environment.step

    def counting(env):
        events.append(1)
        return step(env)

    sc = scenario({"num_replicas": 3, "router": router}, engine={"profile": profile}, kv={"prefix_caching": True},
                  workload={"num_requests": 120, "arrival": {"type": "poisson", "rate": 6.0},
                            "output_tokens": {"type": "uniform", "low": 200, "high": 400},
                            "shared_prefix": {"num_prefixes": 3, "prefix_tokens": 128}})
    monkeypatch.setattr(simpy.Environment, "step", counting)
    fast = ClusterSimulation(sc, macro_steps=True).run()
    fast_events, events[:] = len(events), []
    slow = ClusterSimulation(sc, macro_steps=False).run()
    assert summarize_cluster(fast) | {"sim_wall_s": 0} == summarize_cluster(slow) | {"sim_wall_s": 0}
    assert requests_csv(fast.requests, fast.replica_of) == requests_csv(slow.requests, slow.replica_of)
    for a, b in zip(fast.replicas, slow.replicas):
        assert a.steps.rows[:] == b.steps.rows[:]
    num_steps = sum(len(r.steps) for r in fast.replicas)
    assert fast_events < num_steps / 3 < len(events)  # most steps passed no event


def test_the_shipped_fleet_scenario_is_exact_with_macro_steps():
    sc = load_scenario(SCENARIOS / "fleet-router.yaml", ["workload.num_requests=150"])
    fast, slow = ClusterSimulation(sc, macro_steps=True).run(), ClusterSimulation(sc, macro_steps=False).run()
    assert summarize_cluster(fast) | {"sim_wall_s": 0} == summarize_cluster(slow) | {"sim_wall_s": 0}
    assert requests_csv(fast.requests, fast.replica_of) == requests_csv(slow.requests, slow.replica_of)
    for a, b in zip(fast.replicas, slow.replicas):
        assert a.steps.rows[:] == b.steps.rows[:]

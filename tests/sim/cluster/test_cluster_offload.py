"""Replicas with a KV offload tier each (#43): every replica keeps its own CPU tier (and disk) in
its own host's memory; the cluster's ``kv_offload`` is their sums, every request and every tier
block is accounted, and disaggregated pools are refused."""

from __future__ import annotations

import pytest

from cluster_world import run, scenario
from sim.errors import ConfigError

CHAT = {"num_requests": 60, "arrival": {"type": "poisson", "rate": 6.0},
        "prompt_tokens": {"type": "lognormal", "median": 300, "sigma": 0.5, "max": 800},
        "output_tokens": {"type": "lognormal", "median": 60, "sigma": 0.5, "max": 200},
        "conversation": {"turns": {"type": "fixed", "value": 3}, "think_time_s": 2.0}}
KV = {"prefix_caching": True, "offload": {"tier": "cpu", "capacity_tokens": 200_000}}


def test_each_replica_has_its_own_tier_and_the_cluster_sums_them() -> None:
    sc = scenario({"num_replicas": 2, "router": "round-robin"}, kv=KV, workload=CHAT,
                  engine={"max_model_len": 1800, "num_gpu_blocks_override": 120})
    summary, result = run(sc)
    tiers = [r.allocator.tier for r in result.replicas]
    assert tiers[0] is not tiers[1]
    for t in tiers:
        t.check_invariants()
    t = summary["kv_offload"]
    assert t["lookups"] == sum(x.num_lookups for x in tiers) > 0
    assert t["hit_tokens"] == sum(x.num_hit_blocks for x in tiers) * 16 > 0
    assert t["capacity_blocks"] == sum(x.capacity_blocks for x in tiers)
    assert t["hit_rate"] == pytest.approx(t["hit_tokens"] / t["lookup_tokens"])
    assert t["bandwidth_bytes_per_s"] == tiers[0].spec.bandwidth_bytes_per_s  # a setting, not summed
    assert t["load_link_busy_fraction"] <= 1.0
    reqs = summary["requests"]
    assert reqs["arrived"] == reqs["completed"] + reqs["rejected"] == 180


def test_disaggregated_pools_with_a_tier_are_refused() -> None:
    with pytest.raises(ConfigError, match="kv.offload"):
        scenario({"disaggregation": {"prefill_replicas": 1, "decode_replicas": 1, "kv_transfer": {"bandwidth_gbps": 100, "latency_s": 1e-4, "granularity": "block"}}},
                 kv=KV, workload=CHAT)

"""Runs with a CPU tier over a disk tier (kv.offload as a list, #43): the disk serves what the
small CPU tier let go, its reads cost latency + bytes / read bandwidth and delay only the
request that loads, every block is accounted after every step (the ``simulate`` fixture checks
the GPU pool and both tiers), and every request is accounted for."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.scenario import parse_scenario
from sim.engine.simulation import Simulation
from tests.sim.engine.test_offload_runs import chat, prefill_tokens

CPU_SMALL = {"tier": "cpu", "capacity_tokens": 32}  # two blocks


def tiers(cpu: dict = CPU_SMALL, **disk) -> list[dict]:
    return [cpu, {"tier": "disk", "capacity_tokens": 100_000, **disk}]


def test_the_disk_serves_what_the_cpu_tier_let_go(scenario_dict, simulate, assert_drained) -> None:
    _, cpu_only = simulate(chat(scenario_dict, CPU_SMALL))
    on, s = simulate(chat(scenario_dict, tiers(bandwidth_gb_per_s=2.0, latency_s=1e-3)), keep_requests=True)
    assert_drained(on, s)
    t = s["kv_offload"]
    cpu, disk = t["tiers"]["cpu"], t["tiers"]["disk"]
    assert t["tier"] == "cpu+disk" and disk["hit_tokens"] > 0
    assert t["hit_tokens"] == cpu["hit_tokens"] + disk["hit_tokens"] > cpu_only["kv_offload"]["hit_tokens"]
    block = on.plan.bytes_per_block
    # a disk read: latency + bytes / read bandwidth; every loaded block crosses the host link
    assert disk["bytes_read"] == disk["hit_tokens"] // 16 * block
    assert disk["read_busy_s"] == pytest.approx(disk["reads"] * 1e-3 + disk["bytes_read"] / 2e9)
    assert t["bytes_loaded"] == t["hit_tokens"] // 16 * block
    # what the CPU tier evicted went to the disk, one write per batch at the default write bandwidth
    assert cpu["blocks_demoted"] == disk["blocks_written"] + disk["writes_skipped_full_of_pinned"] > 0
    assert disk["write_bandwidth_bytes_per_s"] == 4.3e9
    assert disk["blocks_written"] - disk["blocks_evicted"] - disk["blocks_moved_up"] == disk["resident_blocks_end"]
    assert sum(r.num_cached_tokens for r in on.requests) == s["kv"]["prefix_cache_hit_tokens"] + t["hit_tokens"]
    assert prefill_tokens(on) == sum(r.num_prompt_tokens - r.num_cached_tokens for r in on.requests)


def test_a_disk_read_delays_the_request(scenario_dict, monkeypatch) -> None:
    """A 1 s disk latency: a request that read from disk has its first token at least 1 s plus
    the host link's copy after its load began."""
    from sim.engine.simulation import Simulation as Sim

    began: dict[int, tuple] = {}
    load = Sim._load

    def spy(self, req, disk_s, seconds):
        began.setdefault(req.request_id, (self.env.now, disk_s, seconds))
        return load(self, req, disk_s, seconds)

    monkeypatch.setattr(Sim, "_load", spy)
    sim = Simulation(parse_scenario(chat(scenario_dict, tiers(latency_s=1.0)), "/tmp/kvsim-test/disk.yaml"),
                     keep_requests=True)
    result = sim.run()
    by_id = {r.request_id: r for r in result.requests}
    read = [(by_id[rid].first_token_s, t0 + d + c) for rid, (t0, d, c) in began.items() if d > 0]
    assert read and all(d >= 1.0 for _, d, _ in began.values() if d > 0)
    assert all(first >= ready for first, ready in read)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blocks=st.integers(11, 30), cpu=st.integers(1, 8), disk=st.integers(1, 40), seqs=st.integers(1, 6),
       policy=st.sampled_from(["continuous", "chunked-prefill"]), store=st.sampled_from(["evicted", "reused"]),
       preemption=st.sampled_from(["recompute", "swap"]), when_full=st.sampled_from(["queue", "reject"]),
       rate=st.sampled_from([5.0, 50.0, 500.0]))
def test_every_block_accounted_after_every_step(scenario_dict, simulate, assert_drained, blocks, cpu, disk, seqs,
                                                policy, store, preemption, when_full, rate) -> None:
    data = chat(scenario_dict, tiers({"tier": "cpu", "capacity_tokens": cpu * 16, "store": store},
                                     capacity_tokens=disk * 16))
    data["engine"] = {**data["engine"], "num_gpu_blocks_override": blocks}
    data["scheduler"] = {"policy": policy, "max_num_seqs": seqs, "preemption": preemption, "when_kv_full": when_full}
    if policy == "chunked-prefill":
        data["scheduler"]["max_num_batched_tokens"] = 32
    data["workload"]["arrival"]["rate"] = rate
    result, summary = simulate(data)
    assert_drained(result, summary)  # arrived = completed + rejected, nothing in flight, the pools' invariants
    tier = result.allocator.tier
    assert tier._pins == {} and tier.lower._pins == {} and not result.scheduler.loading
    assert not set(tier._lru) & set(tier.lower._lru)
    assert tier.lower.num_stored + tier.lower.num_store_skipped == tier.num_demoted

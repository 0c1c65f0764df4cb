"""Runs with a CPU KV tier (kv.offload, #43): hits load instead of prefilling, the link time
delays the request that loads, every block is accounted after every step (the ``simulate``
fixture checks the GPU pool and the tier), and a run without the key is unchanged."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine.simulation import Simulation
from sim.config.scenario import parse_scenario


def chat(scenario_dict, offload: dict | None = None, **kv) -> dict:
    """Six 3-turn conversations on an 11-block pool, one request at a time (no preemption):
    a session's history is evicted from the GPU before its next turn."""
    kv = {"prefix_caching": True, **kv}
    if offload is not None:
        kv["offload"] = offload
    return scenario_dict(
        kv=kv, scheduler={"max_num_seqs": 1},
        workload={"num_requests": 6, "arrival": {"type": "poisson", "rate": 20.0},
                  "prompt_tokens": {"type": "uniform", "low": 10, "high": 30},
                  "output_tokens": {"type": "uniform", "low": 5, "high": 15},
                  "conversation": {"turns": {"type": "fixed", "value": 3}, "think_time_s": 0.01}})


CPU = {"tier": "cpu", "capacity_tokens": 100_000}


def prefill_tokens(result) -> int:
    return int(result.steps.array()["num_prefill_tokens"].sum())


def test_a_hit_loads_instead_of_prefilling(scenario_dict, simulate, assert_drained) -> None:
    off, s_off = simulate(chat(scenario_dict), keep_requests=True)
    on, s_on = simulate(chat(scenario_dict, CPU), keep_requests=True)
    assert_drained(on, s_on)
    tier = s_on["kv_offload"]
    assert tier["hit_tokens"] > 0 and tier["loads"] > 0
    assert s_off["preemptions"]["recompute"] == s_on["preemptions"]["recompute"] == 0
    # every prompt token is computed unless the GPU cache or the tier served it
    for result in (off, on):
        assert prefill_tokens(result) == sum(r.num_prompt_tokens - r.num_cached_tokens for r in result.requests)
    gpu_hits = s_on["kv"]["prefix_cache_hit_tokens"]
    assert sum(r.num_cached_tokens for r in on.requests) == gpu_hits + tier["hit_tokens"]
    assert prefill_tokens(on) < prefill_tokens(off)
    assert prefill_tokens(on) + gpu_hits + tier["hit_tokens"] == prefill_tokens(off) + s_off["kv"]["prefix_cache_hit_tokens"]
    block_bytes = on.plan.bytes_per_block
    assert tier["bytes_loaded"] == tier["hit_tokens"] // 16 * block_bytes
    assert tier["bytes_stored"] == tier["blocks_stored"] * block_bytes
    assert tier["blocks_stored"] - tier["blocks_evicted"] == tier["resident_blocks_end"]
    assert tier["host_memory_peak_bytes"] == tier["peak_resident_blocks"] * block_bytes
    assert tier["link_busy_s"] == pytest.approx(tier["store_link_busy_s"] + tier["load_link_busy_s"])
    assert "kv_offload" not in s_off


def test_the_load_delays_the_request(scenario_dict, simulate, monkeypatch) -> None:
    """A 1 s transfer latency: a request's first token comes at least that after its load began."""
    from sim.sched.tier import TierLoads

    started: dict[int, list] = {}
    try_load = TierLoads._try_load

    def spy(self, req, *args):
        began = try_load(self, req, *args)
        if began is True:
            started.setdefault(req.request_id, []).append(self.clock())
        return began

    monkeypatch.setattr(TierLoads, "_try_load", spy)
    data = chat(scenario_dict, {**CPU, "latency_s": 1.0})
    sim = Simulation(parse_scenario(data, "/tmp/kvsim-test/slow.yaml"), keep_requests=True)
    sim.scheduler.clock = lambda: sim.env.now
    result = sim.run()
    assert started and sim.allocator.tier.load_busy_s >= sim.allocator.tier.num_loads * 1.0
    by_id = {r.request_id: r for r in result.requests}
    firsts = [(by_id[rid].first_token_s, times[0]) for rid, times in started.items()]
    before = [(first, began) for first, began in firsts if began < first]  # (not reloads after a preemption)
    assert before and all(first >= began + 1.0 for first, began in before)


def test_tier_lru_at_capacity(scenario_dict, simulate, assert_drained) -> None:
    """A tier of 4 blocks evicts (its resident count never passes 4) and still serves hits."""
    result, s = simulate(chat(scenario_dict, {"tier": "cpu", "capacity_tokens": 64}))
    assert_drained(result, s)
    tier = s["kv_offload"]
    assert tier["capacity_blocks"] == 4 and tier["peak_resident_blocks"] == 4
    assert tier["blocks_evicted"] > 0 and tier["resident_blocks_end"] == 4


def test_store_reused_stores_fewer(scenario_dict, simulate) -> None:
    _, every = simulate(chat(scenario_dict, CPU))
    _, reused = simulate(chat(scenario_dict, {**CPU, "store": "reused"}))
    assert reused["kv_offload"]["blocks_stored"] < every["kv_offload"]["blocks_stored"]


def test_no_tier_is_the_run_without_the_key(scenario_dict) -> None:
    """``offload: null`` is today's engine: the plain allocator, macro-steps on, the same steps."""
    absent = Simulation(parse_scenario(chat(scenario_dict), "/tmp/kvsim-test/a.yaml"))
    null = Simulation(parse_scenario(chat(scenario_dict, None) | {"kv": {**chat(scenario_dict)["kv"], "offload": None}},
                                     "/tmp/kvsim-test/b.yaml"))
    assert not hasattr(null.allocator, "tier") and null.scheduler.tier is None
    a, b = absent.run(), null.run()
    assert a.steps.array()["time_s"].tolist() == b.steps.array()["time_s"].tolist()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blocks=st.integers(11, 30), capacity=st.integers(1, 40), seqs=st.integers(1, 6),
       policy=st.sampled_from(["continuous", "chunked-prefill"]), store=st.sampled_from(["evicted", "reused"]),
       preemption=st.sampled_from(["recompute", "swap"]), when_full=st.sampled_from(["queue", "reject"]),
       profile=st.sampled_from(["eager", "vllm-v1", "sglang"]), rate=st.sampled_from([5.0, 50.0, 500.0]))
def test_every_block_accounted_after_every_step(scenario_dict, simulate, assert_drained, blocks, capacity, seqs,
                                                policy, store, preemption, when_full, profile, rate) -> None:
    data = chat(scenario_dict, {"tier": "cpu", "capacity_tokens": capacity * 16, "store": store})
    data["engine"] = {**data["engine"], "profile": profile, "num_gpu_blocks_override": blocks}
    data["scheduler"] = {"policy": policy, "max_num_seqs": seqs, "preemption": preemption, "when_kv_full": when_full}
    if policy == "chunked-prefill":
        data["scheduler"]["max_num_batched_tokens"] = 32
    data["workload"]["arrival"]["rate"] = rate
    result, summary = simulate(data)
    assert_drained(result, summary)
    assert not result.scheduler.loading and not result.scheduler.loaded
    assert result.allocator.tier._pins == {}
    assert not math.isnan(summary["kv_offload"]["hit_rate"])


def test_macro_steps_are_off_with_a_tier(scenario_dict) -> None:
    """Macro-steps advance decode stretches without the scheduler; a tier's loads finish at any
    time, so runs with one step one at a time (and without one, macro-steps stay on)."""
    from sim.engine.macro.run import DecodeRun

    on = Simulation(parse_scenario(chat(scenario_dict, CPU), "/tmp/kvsim-test/on.yaml"))
    off = Simulation(parse_scenario(chat(scenario_dict), "/tmp/kvsim-test/off.yaml"))
    assert not DecodeRun(on).enabled and DecodeRun(off).enabled

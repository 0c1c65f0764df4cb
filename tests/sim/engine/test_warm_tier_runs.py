"""Runs with a warm CPU tier (``kv.offload.warm``) and the tier's default transfer cost: unique
prompts all load from the tier, every block accounted after every step (the ``simulate``
fixture), and the load is bound by the link as the blog's 100%-hit benchmark is."""

from __future__ import annotations

import pytest

from sim.config.scenario import parse_scenario
from sim.cost.datasheet import PCIE_COPY_LATENCY_S
from sim.engine.simulation import Simulation

WARM = {"tier": "cpu", "capacity_tokens": 200_000, "warm": True}


def batch(scenario_dict, offload: dict | None, n: int = 40, prompt: int = 100) -> dict:
    kv = {"prefix_caching": True, "offload": offload}
    return scenario_dict(kv=kv, scheduler={"max_num_seqs": 8},
                         workload={"num_requests": n, "arrival": {"type": "offline"},
                                   "prompt_tokens": {"type": "fixed", "value": prompt},
                                   "output_tokens": {"type": "fixed", "value": 1}})


def test_every_unique_prompt_loads_from_a_warm_tier(scenario_dict, simulate, assert_drained) -> None:
    n, prompt = 40, 100
    on, s_on = simulate(batch(scenario_dict, WARM, n, prompt), keep_requests=True)
    off, s_off = simulate(batch(scenario_dict, None, n, prompt), keep_requests=True)
    assert_drained(on, s_on)
    tier = s_on["kv_offload"]
    full = (prompt - 1) // 16  # blocks a request may load: never its last token
    assert tier["hit_rate"] == 1.0 and tier["hit_tokens"] == n * full * 16
    assert tier["loads"] == n and tier["blocks_warmed"] == n * full
    assert tier["blocks_stored"] == 0  # the GPU evicts nothing the tier lacks
    assert all(r.num_cached_tokens == full * 16 for r in on.requests)
    assert s_off["kv"]["prefix_cache_hit_tokens"] == 0  # unique prompts: nothing on the GPU either way
    prefilled = [int(r.steps.array()["num_prefill_tokens"].sum()) for r in (on, off)]
    assert prefilled == [n * (prompt - full * 16), n * prompt]
    # each load holds the link; the run lasts at least as long as the link was busy
    assert 0 < tier["load_link_busy_fraction"] <= 1.0
    assert "blocks_warmed" not in simulate(batch(scenario_dict, {**WARM, "warm": False}, 4, prompt))[1]["kv_offload"]


def test_default_transfer_cost_is_one_copy_then_the_link(scenario_dict) -> None:
    sim = Simulation(parse_scenario(batch(scenario_dict, WARM, 4), "/tmp/kvsim-test/s.yaml"))
    spec = sim.allocator.tier.spec
    assert spec.latency_s == PCIE_COPY_LATENCY_S  # vLLM >= 0.12's contiguous blocks: not one copy per layer
    sim.run()
    tier = sim.allocator.tier
    blocks = tier.num_hit_blocks
    assert blocks == 4 * ((100 - 1) // 16) and tier.num_loads == 4
    assert tier.load_busy_s == pytest.approx(tier.num_loads * spec.latency_s
                                             + blocks * spec.block_bytes / spec.bandwidth_bytes_per_s)

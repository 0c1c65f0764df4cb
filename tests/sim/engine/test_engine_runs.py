"""The SimPy engine end to end on tiny scenarios (tiny-llama, pools of a few blocks)."""

from __future__ import annotations

import pytest

from sim.cost.shape import BatchShape
from sim.engine.simulation import Simulation
from sim.outputs.files import requests_csv, steps_csv
from sim.config.scenario import parse_scenario

BYTES_PER_BLOCK_16 = 16 * 1024  # tiny-llama bf16: 2 layers x 2 KV heads x 64 x 2 (K,V) x 2 B = 1024 B/token


def test_one_request_time_stamped_log(scenario_dict, tmp_path) -> None:
    """Prefill of 16 tokens, then 2 decodes: every time stamp from the cost model."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,16,3\n")
    data = scenario_dict(workload={"trace": {"path": str(trace)}})
    sim = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")))
    result = sim.run()
    cm = sim.cost
    t1 = cm.step_time_s(BatchShape(num_seqs=1, num_prefill_tokens=16, num_decode_tokens=0, decode_kv_tokens=0,
                                   prefill_attn_pairs=16 * 17 / 2, prefill_kv_tokens=16))
    d2 = cm.step_time_s(BatchShape(num_seqs=1, num_prefill_tokens=0, num_decode_tokens=1, decode_kv_tokens=17,
                                   prefill_attn_pairs=0.0, prefill_kv_tokens=0))
    d3 = cm.step_time_s(BatchShape(num_seqs=1, num_prefill_tokens=0, num_decode_tokens=1, decode_kv_tokens=18,
                                   prefill_attn_pairs=0.0, prefill_kv_tokens=0))
    assert 0 < t1 and 0 < d2 < d3
    steps = result.steps.array()
    assert list(steps["time_s"]) == pytest.approx([t1, t1 + d2, t1 + d2 + d3])
    assert list(steps["num_prefill_tokens"]) == [16, 0, 0]
    assert list(steps["num_decode_tokens"]) == [0, 1, 1]
    # Recorded after each step: 16 computed tokens in 1 block, then 17 in 2 blocks, then
    # the request finishes and frees everything.
    assert list(steps["kv_allocated_slots"]) == [16, 32, 0]
    assert list(steps["kv_token_slots"]) == [16, 17, 0]
    assert list(steps["num_running"]) == [1, 1, 0]
    (r,) = result.requests
    assert r.first_token_s == pytest.approx(t1)
    assert r.finish_s == pytest.approx(t1 + d2 + d3) == result.end_s
    assert result.allocator.num_allocated_slots() == 0


@pytest.mark.parametrize("policy", ["continuous", "chunked-prefill", "static"])
@pytest.mark.parametrize("allocator", ["paged", "contiguous-static", "contiguous-exact"])
def test_every_combination_drains(simulate, assert_drained, scenario_dict, policy,
                                  allocator) -> None:
    data = scenario_dict(
        kv={"allocator": allocator},
        scheduler={"policy": policy, "max_num_batched_tokens": 48 if policy == "chunked-prefill" else None},
        workload={"num_requests": 12, "arrival": {"type": "poisson", "rate": 200.0},
                  "prompt_tokens": {"type": "uniform", "low": 8, "high": 100},
                  "output_tokens": {"type": "uniform", "low": 1, "high": 50}},
    )
    if data["scheduler"]["max_num_batched_tokens"] is None:
        del data["scheduler"]["max_num_batched_tokens"]
    result, summary = simulate(data)
    assert_drained(result, summary)
    assert summary["requests"]["completed"] == 12  # queue mode: nobody is turned away


def test_paged_pressure_causes_recompute_preemption(simulate, assert_drained, scenario_dict) -> None:
    data = scenario_dict(workload={
        "num_requests": 8, "arrival": {"type": "constant", "rate": 1000.0},
        "prompt_tokens": {"type": "fixed", "value": 40},
        "output_tokens": {"type": "fixed", "value": 100}})
    result, summary = simulate(data)
    assert_drained(result, summary)
    # 8 x 140 tokens can never be held at once in 176 slots: someone must be preempted.
    assert summary["preemptions"]["recompute"] > 0
    assert summary["preemptions"]["recomputed_tokens"] > 0
    assert summary["preemptions"]["swap"] == 0
    assert sum(r.num_preemptions for r in result.requests) == summary["preemptions"]["recompute"]


def test_swap_mode_swaps_under_pressure(simulate, assert_drained, scenario_dict) -> None:
    data = scenario_dict(
        scheduler={"preemption": "swap"},
        workload={"num_requests": 8, "arrival": {"type": "constant", "rate": 1000.0},
                  "prompt_tokens": {"type": "fixed", "value": 40},
                  "output_tokens": {"type": "fixed", "value": 100}})
    result, summary = simulate(data)
    assert_drained(result, summary)
    pre = summary["preemptions"]
    assert pre["swap"] > 0 and pre["recompute"] == 0
    assert pre["swap_peak_bytes"] > 0
    assert pre["swap_peak_bytes"] % BYTES_PER_BLOCK_16 == 0  # whole blocks are swapped
    steps = result.steps.array()
    assert steps["swap_bytes"].sum() > 0
    # Every swap-out is counted on the request it moved.
    assert sum(r.num_swaps for r in result.requests) == pre["swap"]


def test_tiny_swap_space_falls_back_to_recompute(simulate, assert_drained, scenario_dict) -> None:
    data = scenario_dict(
        kv={"swap_space_gb": 1e-6},  # ~1 KB: not even one 16 KiB block
        scheduler={"preemption": "swap"},
        workload={"num_requests": 8, "arrival": {"type": "constant", "rate": 1000.0},
                  "prompt_tokens": {"type": "fixed", "value": 40},
                  "output_tokens": {"type": "fixed", "value": 100}})
    result, summary = simulate(data)
    assert_drained(result, summary)
    assert summary["preemptions"]["swap"] == 0 and summary["preemptions"]["recompute"] > 0


def test_reject_mode_rejects_with_kv_cache_full(simulate, assert_drained, scenario_dict) -> None:
    data = scenario_dict(
        kv={"allocator": "contiguous-static"},
        scheduler={"when_kv_full": "reject"},
        workload={"num_requests": 5, "arrival": {"type": "constant", "rate": 1000.0},
                  "prompt_tokens": {"type": "fixed", "value": 20},
                  "output_tokens": {"type": "fixed", "value": 50}})
    result, summary = simulate(data)
    assert_drained(result, summary)
    # static reservations of 160 tokens in a 176-slot pool: one at a time, the rest arrive
    # 1 ms apart while it runs and are turned away.
    assert summary["requests"]["completed"] == 1
    assert summary["requests"]["rejected_by_reason"] == {"kv_cache_full": 4}


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_static_batch_whose_last_live_member_is_preempted_still_ends(
        simulate, assert_drained, scenario_dict, tmp_path, preemption) -> None:
    """a finishes at prefill and pads; b outgrows what a leaves free and is preempted.

    The batch then has no live member; a's answer must still go out and b run again.
    """
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,80,1\n0.0,80,40\n")
    data = scenario_dict(engine={"max_model_len": 176}, scheduler={"policy": "static", "preemption": preemption},
                         workload={"trace": {"path": str(trace)}})
    result, summary = simulate(data, str(tmp_path / "s.yaml"))
    assert_drained(result, summary)
    a, b = result.requests
    assert summary["requests"]["completed"] == 2
    assert b.num_preemptions >= 1
    assert a.finish_s < b.finish_s
    # The batch ends when b is preempted, not one (padding-only) decode step later: a step
    # that computed nothing took no time beyond its swap copies.
    rows = result.steps.array()
    idle = (rows["num_prefill_tokens"] + rows["num_decode_tokens"]) == 0
    assert idle.any()
    assert all(d == 0 or swapped > 0 for d, swapped in zip(rows["duration_s"][idle], rows["swap_bytes"][idle]))


def test_same_seed_same_summary(simulate, scenario_dict) -> None:
    data = scenario_dict(
        kv={"prefix_caching": True},
        workload={"num_requests": 10, "arrival": {"type": "poisson", "rate": 20.0},
                  "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                  "output_tokens": {"type": "uniform", "low": 1, "high": 60},
                  "shared_prefix": {"num_prefixes": 2, "prefix_tokens": 32},
                  "conversation": {"turns": {"type": "uniform", "low": 1, "high": 3}, "think_time_s": 0.5}})
    r1, s1 = simulate(data)
    r2, s2 = simulate(data)
    s1.pop("sim_wall_s")
    s2.pop("sim_wall_s")
    assert s1 == s2
    assert requests_csv(r1.requests) == requests_csv(r2.requests)
    assert steps_csv(r1.steps) == steps_csv(r2.steps)
    other = simulate({**data, "seed": 2})[1]
    other.pop("sim_wall_s")
    assert other != s1  # the seed does drive the workload


def test_conversation_turns_carry_history_and_hit_the_cache(simulate, assert_drained,
                                                           scenario_dict) -> None:
    B = 16
    data = scenario_dict(
        engine={"max_model_len": 1024, "num_gpu_blocks_override": 2000},
        kv={"prefix_caching": True},
        workload={"num_requests": 4, "arrival": {"type": "poisson", "rate": 2.0},
                  "prompt_tokens": {"type": "uniform", "low": 5, "high": 60},
                  "output_tokens": {"type": "uniform", "low": 1, "high": 40},
                  "conversation": {"turns": {"type": "fixed", "value": 3}, "think_time_s": 1.0}})
    result, summary = simulate(data, keep_requests=True)  # reads the turns' prompt segments
    assert_drained(result, summary)
    assert summary["requests"]["arrived"] == 12
    assert result.allocator.pool.num_evictions == 0  # big pool: every block stays cached
    by_session: dict[int, list] = {}
    for r in result.requests:
        by_session.setdefault(r.session.session_id, []).append(r)
    for turns in by_session.values():
        assert [r.turn for r in turns] == [0, 1, 2]
        assert turns[0].num_cached_tokens == 0
        for prev, cur in zip(turns, turns[1:]):
            history = prev.prompt_segments + ((prev.output_segment, prev.num_output_tokens),)
            assert cur.prompt_segments[: len(history)] == history
            spec = cur.session.turns[cur.turn]
            assert cur.num_prompt_tokens == prev.num_prompt_tokens + prev.num_output_tokens + spec.user_tokens
            assert cur.arrival_s == pytest.approx(prev.finish_s + spec.think_time_s)
            # prev computed all but its last sampled token: (H - 1) // B full blocks cached
            h = prev.num_prompt_tokens + prev.num_output_tokens
            assert cur.num_cached_tokens == (h - 1) // B * B
    hits = sum(r.num_cached_tokens for r in result.requests)
    assert summary["kv"]["prefix_cache_hit_tokens"] == hits > 0
    queried = sum(r.num_prompt_tokens for r in result.requests)
    assert summary["kv"]["prefix_cache_hit_rate"] == pytest.approx(hits / queried)


def test_shared_system_prompt_hits_without_conversations(simulate, assert_drained,
                                                         scenario_dict) -> None:
    data = scenario_dict(
        engine={"max_model_len": 512, "num_gpu_blocks_override": 500},
        kv={"prefix_caching": True},
        workload={"num_requests": 6, "arrival": {"type": "constant", "rate": 10.0},
                  "prompt_tokens": {"type": "uniform", "low": 5, "high": 40},
                  "output_tokens": {"type": "fixed", "value": 3},
                  "shared_prefix": {"num_prefixes": 1, "prefix_tokens": 48}})
    result, summary = simulate(data)
    assert_drained(result, summary)
    first, *rest = result.requests
    assert first.num_cached_tokens == 0 and first.prefix_len == 48
    assert all(r.num_cached_tokens == 48 for r in rest)  # 3 whole blocks of system prompt


def test_prefix_caching_off_means_no_hits(simulate, scenario_dict) -> None:
    data = scenario_dict(workload={
        "num_requests": 6, "arrival": {"type": "constant", "rate": 10.0},
        "prompt_tokens": {"type": "uniform", "low": 5, "high": 40},
        "output_tokens": {"type": "fixed", "value": 3},
        "shared_prefix": {"num_prefixes": 1, "prefix_tokens": 48}})
    result, summary = simulate(data)
    assert summary["kv"]["prefix_cache_hit_rate"] is None
    assert all(r.num_cached_tokens == 0 for r in result.requests)


@pytest.mark.parametrize("weights", ["bf16", "int4"])
def test_summary_says_where_the_memory_goes(simulate, scenario_dict, weights) -> None:
    data = scenario_dict(engine={"weight_dtype": weights, "num_gpu_blocks_override": None})
    _, s = simulate(data)
    m, kv = s["memory"], s["kv"]
    budget = m["gpu_memory_utilization"] * m["gpu_memory_bytes"]
    parts = m["weight_bytes"] + m["activation_peak_bytes"] + m["runtime_overhead_bytes"] + m["kv_pool_bytes"]
    assert budget - 1 <= parts <= budget  # the pool is what the budget leaves (floored)
    assert 0 <= m["kv_pool_bytes"] - kv["pool_bytes"] < kv["pool_bytes"] / kv["num_gpu_blocks"]  # whole blocks
    assert m["weight_dtype"] == weights and m["embedding_dtype"] == "bf16" and m["kv_dtype"] == "bf16"

"""Eviction policies: preemption victims, prefix-cache eviction order, token budgets,
the admission watermark. Tiny worlds with exact answers, then properties over runs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli.main import main
from sim.kv.block_pool import BlockPool
from sim.kv.contiguous import ContiguousAllocator
from sim.kv.eviction import PrefixEviction
from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace
from sim.kv.token_budget import TokenBudget, TokenEviction
from sim.config.scenario import PreemptionMode
from sim.sched.continuous import ContinuousScheduler
from sim.sched.preemption import Preemptor
from sim.sched.victim import RemainingOutputModel, VictimPolicy, pick_victim

B = 16

# ------------------------------------------------------------------ preemption victims


def _running(make_request, sizes_blocks, generated):
    """Requests admitted in order 0, 1, 2, ... holding the given numbers of blocks."""
    alloc = PagedAllocator(11, B)
    reqs = []
    for i, (blocks, gen) in enumerate(zip(sizes_blocks, generated)):
        r = make_request(i, blocks * B - gen, output=100, max_tokens=100)
        r.num_generated = gen
        r.admit_seq = i
        assert alloc.allocate_slots(r, blocks * B - 1)
        r.num_computed_tokens = blocks * B - 1
        reqs.append(r)
    alloc.check_invariants()
    return alloc, reqs


@pytest.mark.parametrize("policy, expected", [
    (VictimPolicy.LIFO, 3),  # the most recently admitted
    (VictimPolicy.FEWEST_BLOCKS, 2),  # 1 block (ties with none)
    (VictimPolicy.MOST_BLOCKS, 1),  # 4 blocks
    (VictimPolicy.LONGEST_REMAINING, 0),  # generated least so far: most expected to come
])
def test_each_victim_policy_picks_a_known_request(make_request, policy, expected) -> None:
    # 11 blocks: request 0 holds 2, request 1 holds 4, request 2 holds 1, request 3 holds 3.
    alloc, reqs = _running(make_request, [2, 4, 1, 3], generated=[1, 30, 20, 40])
    remaining = RemainingOutputModel([50] * 10)  # every answer is 50 tokens
    victim = pick_victim(policy, reqs, alloc.held_slots, remaining)
    assert victim.request_id == expected


def test_victim_ties_go_to_the_most_recently_admitted(make_request) -> None:
    alloc, reqs = _running(make_request, [2, 2, 2], generated=[5, 5, 5])
    remaining = RemainingOutputModel([50])
    for policy in VictimPolicy:
        assert pick_victim(policy, reqs, alloc.held_slots, remaining).request_id == 2


def test_longest_remaining_never_reads_the_true_length(make_request) -> None:
    alloc, reqs = _running(make_request, [2, 2], generated=[5, 5])
    reqs[0].num_output_tokens, reqs[1].num_output_tokens = 1000, 6  # hidden truths differ
    victim = pick_victim(VictimPolicy.LONGEST_REMAINING, reqs, alloc.held_slots,
                         RemainingOutputModel([10, 20, 30]))
    assert victim is reqs[1]  # equal expectations: the tie-break decides, not the truth


def test_remaining_output_model_is_the_conditional_mean() -> None:
    model = RemainingOutputModel([10, 20, 30])
    assert model.expected_remaining(0, 1000) == pytest.approx(20.0)  # E[L] - 0
    assert model.expected_remaining(15, 1000) == pytest.approx(10.0)  # E[L | L > 15] = 25
    assert model.expected_remaining(20, 1000) == pytest.approx(10.0)  # only 30 is longer
    assert model.expected_remaining(15, 18) == pytest.approx(3.0)  # capped by max_tokens
    assert model.expected_remaining(99, 1000) == 1.0  # beyond the sample: one more token


@pytest.mark.parametrize("policy", [VictimPolicy.LIFO, VictimPolicy.MOST_BLOCKS,
                                    VictimPolicy.FEWEST_BLOCKS])
def test_the_scheduler_preempts_the_policys_victim(make_request, policy) -> None:
    # 11 blocks: r0 holds 5, r1 holds 3, r2 holds 2; 1 is free. All three decode and each
    # needs a new block: r0 takes the last free one, then r1 needs room and the victim is
    # picked among the requests not yet scheduled, {r1, r2}: LIFO and FEWEST_BLOCKS pick
    # r2; MOST_BLOCKS picks r1 itself (3 blocks against 2).
    alloc = PagedAllocator(11, B)
    pre = Preemptor(PreemptionMode.RECOMPUTE, alloc, SwapSpace(0), 1.0)
    sched = ContinuousScheduler(alloc, pre, chunked=False, max_num_seqs=8,
                                max_num_batched_tokens=1000, max_model_len=1000,
                                reject_when_full=False, victim_policy=policy)
    reqs = []
    for i, blocks in enumerate([5, 3, 2]):
        r = make_request(i, blocks * B, output=50, max_tokens=50)
        sched.add_request(r)
        reqs.append(r)
    out = sched.schedule()  # admits all three prompts: 10 blocks
    sched.update_from_output(out, 1.0)
    out = sched.schedule()  # each decode needs a new block; only one is free
    expected = {VictimPolicy.LIFO: 2, VictimPolicy.MOST_BLOCKS: 1, VictimPolicy.FEWEST_BLOCKS: 2}
    assert [r.request_id for r in out.preempted][0] == expected[policy]
    alloc.check_invariants()


# ------------------------------------------------------------ prefix-cache eviction order


def _cached_pool(policy: PrefixEviction) -> BlockPool:
    """5 blocks: blocks 0-3 cached with hashes 100-103 (cached in that order), then freed
    in the order 2, 0, 3, 1; block 3 was hit twice, block 0 once."""
    pool = BlockPool(5, policy)
    blocks = [pool.pop_free() for _ in range(4)]
    assert blocks == [0, 1, 2, 3]
    for b in blocks:
        pool.cache(b, 100 + b)
    for b, hits in ((3, 2), (0, 1)):
        for _ in range(hits):
            pool.touch(b)
            pool.release([b])
    pool.release([2, 0, 3, 1])
    pool.check_invariants()
    return pool


@pytest.mark.parametrize("policy, order", [
    (PrefixEviction.LRU, [4, 2, 0, 3, 1]),  # freeing order; the never-used block 4 first
    (PrefixEviction.FIFO, [4, 0, 1, 2, 3]),  # uncached first, then order of entering the cache
    (PrefixEviction.LFU, [4, 2, 1, 0, 3]),  # uncached first, then fewest hits (2, 1: 0 hits)
])
def test_prefix_cache_eviction_order(policy, order) -> None:
    pool = _cached_pool(policy)
    assert pool.free_order() == order
    popped = [pool.pop_free() for _ in range(5)]
    assert popped == order
    assert pool.num_evictions == 4 and pool.get_cached(100) is None
    pool.check_invariants()


@pytest.mark.parametrize("policy", list(PrefixEviction))
def test_a_revived_block_leaves_the_eviction_order(policy) -> None:
    pool = _cached_pool(policy)
    pool.touch(pool.get_cached(102))  # a hit on block 2 takes it out of the free queue
    assert 2 not in pool.free_order() and len(pool.free_order()) == 4
    pool.check_invariants()
    pool.release([2])
    assert sorted(pool.free_order()) == [0, 1, 2, 3, 4]


# -------------------------------------------------------------------------- token budgets


def _kept_positions(budget: TokenBudget, T: int) -> set[int]:
    if budget.policy == TokenEviction.NONE or T <= budget.max_tokens:
        return set(range(T))
    if budget.policy == TokenEviction.SLIDING_WINDOW:
        return set(range(T - budget.window_tokens, T))
    return set(range(budget.sink_tokens)) | set(range(T - budget.window_tokens, T))


budgets = st.one_of(
    st.just(TokenBudget()),
    st.builds(TokenBudget, st.just(TokenEviction.SLIDING_WINDOW), st.integers(1, 80)),
    st.builds(TokenBudget, st.just(TokenEviction.STREAMING), st.integers(1, 80), st.integers(1, 40)),
)


@given(budgets, st.integers(0, 300), st.sampled_from([1, 8, 16, 32]))
def test_budget_blocks_cover_exactly_the_kept_tokens(budget, T, block_size) -> None:
    kept = _kept_positions(budget, T)
    assert budget.kept_tokens(T) == len(kept)
    assert budget.num_blocks(T, block_size) == len({p // block_size for p in kept})


@given(budgets, st.integers(0, 200), st.integers(1, 100))
def test_attended_pairs_match_a_brute_force_sum(budget, cached, new) -> None:
    cap = budget.max_tokens
    brute = sum(p + 1 if cap is None else min(p + 1, cap) for p in range(cached, cached + new))
    assert budget.attended_pairs(cached, new) == pytest.approx(brute)


def test_streaming_request_never_keeps_more_than_sinks_plus_window(make_request) -> None:
    S, W = 20, 40
    budget = TokenBudget(TokenEviction.STREAMING, window_tokens=W, sink_tokens=S)
    alloc = PagedAllocator(11, B, budget=budget)
    r = make_request(0, 30, output=400, max_tokens=400)
    assert alloc.allocate_slots(r, 30)
    r.num_computed_tokens, r.num_generated = 30, 1
    sink_blocks = -(-S // B)
    for _ in range(398):  # decode one token at a time, far past S + W
        assert alloc.allocate_slots(r, 1)
        r.num_computed_tokens += 1
        r.num_generated += 1
        assert alloc.kept_tokens(r.num_computed_tokens) <= S + W
        assert alloc.held_slots(r) <= (sink_blocks + -(-W // B) + 1) * B
        alloc.check_invariants()
    assert alloc.block_tables[0][:sink_blocks] == [0, 1]  # the sink blocks never move
    assert alloc.num_dropped_blocks > 20
    alloc.free(r)
    assert alloc.num_allocated_slots() == 0


def test_contiguous_ring_buffer_reserves_the_budget(make_request) -> None:
    budget = TokenBudget(TokenEviction.SLIDING_WINDOW, window_tokens=64)
    alloc = ContiguousAllocator(1000, max_kv_tokens=512, exact=False, budget=budget)
    r = make_request(0, 100, output=200, max_tokens=200)
    assert alloc.allocate_slots(r, 100)
    assert alloc.held_slots(r) == 64
    r.num_computed_tokens = 250
    assert alloc.allocate_slots(r, 1)  # a ring buffer: no growth needed


# ------------------------------------------------------------------- admission watermark


def test_watermark_holds_back_admission_but_not_growth(make_request) -> None:
    alloc = PagedAllocator(11, B)
    a = make_request(0, 8 * B)
    assert not alloc.allocate_slots(a, 8 * B, keep_free_slots=4 * B)  # would leave 3 free
    assert alloc.num_allocated_slots() == 0  # nothing changed
    assert alloc.allocate_slots(a, 7 * B, keep_free_slots=4 * B)  # leaves exactly 4
    a.num_computed_tokens = 7 * B
    assert alloc.allocate_slots(a, 1)  # a running request may still grow into the reserve


# ---------------------------------------------------------------- whole runs, properties


@settings(max_examples=20, deadline=None)
@given(
    victim=st.sampled_from(list(VictimPolicy)),
    eviction=st.sampled_from(list(PrefixEviction)),
    token=st.sampled_from(["none", "sliding-window", "streaming", "h2o-budget"]),
    allocator=st.sampled_from(["paged", "contiguous-static", "contiguous-exact"]),
    preemption=st.sampled_from(["recompute", "swap"]),
    watermark=st.sampled_from([0.0, 0.1]),
    seed=st.integers(0, 3),
)
def test_every_policy_combination_accounts_for_everything(
        simulate, assert_drained, scenario_dict, victim, eviction, token, allocator,
        preemption, watermark, seed) -> None:
    caching = allocator == "paged" and token == "none"
    sizes = {"none": {}, "sliding-window": {"window_tokens": 40},
             "streaming": {"sink_tokens": 8, "window_tokens": 32},
             "h2o-budget": {"heavy_tokens": 16, "window_tokens": 24}}[token]
    data = scenario_dict(
        seed=seed,
        kv={"allocator": allocator, "prefix_caching": caching, "prefix_cache_eviction": str(eviction),
            "token_eviction": {"policy": token, **sizes}, "swap_space_gb": 1e-4},
        scheduler={"preemption": preemption, "preemption_victim": str(victim), "watermark": watermark},
        workload={"num_requests": 12, "arrival": {"type": "poisson", "rate": 40.0},
                  "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                  "output_tokens": {"type": "uniform", "low": 1, "high": 90},
                  "shared_prefix": {"num_prefixes": 2, "prefix_tokens": 32}},
    )
    result, summary = simulate(data)
    assert_drained(result, summary)
    again = simulate(data)[1]
    summary.pop("sim_wall_s"), again.pop("sim_wall_s")
    assert json.dumps(summary, sort_keys=True) == json.dumps(again, sort_keys=True)


def test_token_budget_bounds_memory_and_attention_reads(simulate, scenario_dict) -> None:
    workload = {"num_requests": 4, "arrival": {"type": "constant", "rate": 100.0},
                "prompt_tokens": {"type": "fixed", "value": 40},
                "output_tokens": {"type": "fixed", "value": 110}}
    base = scenario_dict(workload=workload)
    bounded = scenario_dict(workload=workload,
                            kv={"token_eviction": {"policy": "sliding-window", "window_tokens": 32}})
    r0, s0 = simulate(base)
    r1, s1 = simulate(bounded)
    assert s0["kv"]["tokens_evicted"] == 0
    assert s1["kv"]["tokens_evicted"] == 4 * (40 + 110 - 1 - 32)
    assert s1["kv"]["peak_token_fraction"] < s0["kv"]["peak_token_fraction"]
    assert s1["engine"]["busy_s"] < s0["engine"]["busy_s"]  # decode reads fewer KV bytes
    assert s1["notes"] and not s0["notes"]


def test_sliding_window_model_bounds_kv_automatically(simulate, scenario_dict) -> None:
    data = scenario_dict(model="mistral-7b", gpu="a100-80gb",
                         engine={"max_model_len": 8192, "num_gpu_blocks_override": 2000},
                         workload={"num_requests": 2, "arrival": {"type": "constant", "rate": 10.0},
                                   "prompt_tokens": {"type": "fixed", "value": 5000},
                                   "output_tokens": {"type": "fixed", "value": 20}})
    result, summary = simulate(data)
    assert summary["kv"]["token_eviction"] == "sliding-window"
    assert summary["kv"]["max_kv_tokens_per_request"] == 4096
    assert summary["kv"]["tokens_evicted"] == 2 * (5000 + 20 - 1 - 4096)


def test_prefix_caching_with_a_sliding_window_model_is_refused(tmp_path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "model: mistral-7b\nengine: {max_model_len: 8192}\nkv: {prefix_caching: true}\n"
        "workload: {num_requests: 1, arrival: {type: constant, rate: 1.0},\n"
        "  prompt_tokens: {type: fixed, value: 10}, output_tokens: {type: fixed, value: 10}}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: kv.prefix_caching: ")


@pytest.mark.parametrize("kv, key", [
    ({"token_eviction": {"policy": "streaming", "window_tokens": 32}}, "kv.token_eviction"),
    ({"token_eviction": {"policy": "sliding-window"}}, "kv.token_eviction"),
    ({"token_eviction": {"policy": "h2o-budget", "window_tokens": 8, "heavy_tokens": -1}},
     "kv.token_eviction.heavy_tokens"),
    ({"prefix_caching": True, "token_eviction": {"policy": "sliding-window", "window_tokens": 8}}, "kv"),
    ({"prefix_cache_eviction": "mru"}, "kv.prefix_cache_eviction"),
])
def test_bad_eviction_settings_name_the_key(tmp_path, capsys, kv, key) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"kv": kv, "workload": {
        "num_requests": 1, "arrival": {"type": "constant", "rate": 1.0},
        "prompt_tokens": {"type": "fixed", "value": 10}, "output_tokens": {"type": "fixed", "value": 10}}}))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: {key}: ")


def test_zipf_popularity_favours_the_first_system_prompts(scenario_dict) -> None:
    import numpy as np

    from sim.config.scenario import parse_scenario
    from sim.workload.generate import build_workload

    data = scenario_dict(workload={
        "num_requests": 4000, "arrival": {"type": "constant", "rate": 10.0},
        "prompt_tokens": {"type": "fixed", "value": 10}, "output_tokens": {"type": "fixed", "value": 5},
        "shared_prefix": {"num_prefixes": 10, "prefix_tokens": 16, "zipf_a": 1.2}})
    sessions = build_workload(parse_scenario(data, "/tmp/s.yaml"), np.random.default_rng(0))
    counts = np.bincount([s.prefix[0] for s in sessions], minlength=11)[1:]
    weights = np.arange(1, 11) ** -1.2
    expected = 4000 * weights / weights.sum()
    assert counts[0] > counts[4] > counts[9]
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 5)


def test_a_profiles_prefix_caching_default_yields_to_a_sliding_window(tmp_path, capsys) -> None:
    """vllm-v1 turns prefix caching on by default, but not where the model's window forbids it."""
    path = tmp_path / "s.yaml"
    path.write_text(
        "model: mistral-7b\nengine: {profile: vllm-v1, max_model_len: 8192}\n"
        "workload: {num_requests: 2, arrival: {type: constant, rate: 1.0},\n"
        "  prompt_tokens: {type: fixed, value: 10}, output_tokens: {type: fixed, value: 10}}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet", "--no-report"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["policies"]["prefix_caching"] is False
    assert summary["policies"]["batching"] == "chunked-prefill"  # the other default stands
    assert summary["requests"]["completed"] == 2

"""vLLM 0.33's own scheduling rules (sim/cost/profile.py ``VLLM_0_33``), each on a tiny pool,
without vLLM: the examples are the behaviours tests/conformance/ checks against vLLM itself.

A "step" is what the engine does: ``schedule()`` then ``update_from_output(out, t)``.
"""

from __future__ import annotations

from sim.config.scenario import PreemptionMode, parse_scenario
from sim.engine.parts import build_parts
from sim.kv.block_pool import BlockPool
from sim.kv.eviction import UnhashedFirstLRUQueue
from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace
from sim.sched.continuous import ContinuousScheduler
from sim.sched.preemption import Preemptor

B = 16


def world(num_blocks=11, *, budget=1000, max_num_seqs=8, prefix_caching=False, **rules):
    alloc = PagedAllocator(num_blocks, B, prefix_caching=prefix_caching, unhashed_first=prefix_caching)
    pre = Preemptor(PreemptionMode.RECOMPUTE, alloc, SwapSpace(0), 2.0)
    return ContinuousScheduler(alloc, pre, chunked=True, max_num_seqs=max_num_seqs,
                               max_num_batched_tokens=budget, max_model_len=10_000,
                               reject_when_full=False, **rules)


def step(sched, now):
    out = sched.schedule()
    done = sched.update_from_output(out, now)
    sched.allocator.check_invariants()
    return [(r.request_id, n) for r, n in out.scheduled], [r.request_id for r in out.preempted], done


def test_the_free_queue_reuses_blank_blocks_first_and_keeps_cached_ones_longest():
    """vLLM 0.33's BlockPool: a request's freed blocks without a hash go to the front (its
    last block first), those with a hash to the back (its last block first)."""
    pool = BlockPool(11, unhashed_first=True, duplicates=True)
    assert isinstance(pool._free, UnhashedFirstLRUQueue)
    x = pool.pop_free_many(3)  # [0, 1, 2]: 0 and 1 full and hashed, 2 partly filled
    pool.cache(x[0], 100)
    pool.cache(x[1], 101)
    y = pool.pop_free_many(2)  # [3, 4]: 3 hashed
    pool.cache(y[0], 200)
    pool.release(x[::-1])
    pool.release(y[::-1])
    assert pool.free_order() == [4, 2, 5, 6, 7, 8, 9, 10, 1, 0, 3]
    pool.check_invariants()
    assert pool.pop_free_many(3) == [4, 2, 5] and pool.num_evictions == 0  # no cached prefix lost


def test_duplicate_blocks_are_cached_and_found_after_the_first_goes():
    pool = BlockPool(4, unhashed_first=True, duplicates=True)
    a, b = pool.pop_free_many(2)
    pool.cache(a, 7)
    pool.cache(b, 7)  # the same content, computed twice: cached too (vLLM keeps both)
    assert pool.get_cached(7) == a and pool.block_hash[b] == 7
    pool.release([a, b])  # both cached: to the back, in order
    pool.pop_free_many(3)  # the two blank blocks, then a: evicted
    assert pool.get_cached(7) == b
    pool.check_invariants()
    plain = BlockPool(4)  # kvsim's generic pool keeps one block per content
    c, d = plain.pop_free_many(2)
    plain.cache(c, 7)
    plain.cache(d, 7)
    assert plain.block_hash[d] is None


def test_admission_needs_the_whole_sequence_to_fit(make_request):
    """scheduler_reserve_full_isl: a 112-token prompt (7 blocks) waits while 6 blocks are free,
    though its first chunk would fit, and the request behind it waits too (head of line);
    kvsim's generic rule admits the chunk."""
    for full, admitted in ((True, False), (False, True)):
        sched = world(10, budget=34, admit_full_sequence=full, decodes_first=False)
        sched.add_request(make_request(0, 63, output=50))
        step(sched, 1.0)  # 34 of 63
        step(sched, 2.0)  # 29 more: 4 blocks held, 6 free
        assert sched.allocator.pool.num_free == 6
        sched.add_request(make_request(1, 112, output=5))
        sched.add_request(make_request(2, 8, output=5))
        batch, _, _ = step(sched, 3.0)
        assert batch[0] == (0, 1)
        assert (1 in dict(batch)) is admitted
        assert 2 not in dict(batch)  # behind the head: waits (and under the generic rule, no budget left)


def test_running_requests_are_served_in_admission_order(make_request):
    """vLLM V1 walks ``running`` in admission order, a prompt chunk before a later decode;
    kvsim's generic chunked prefill serves decodes first. (And the long-prefill cap holds
    a chunk to 4 tokens while another request is in the engine.)"""
    for decodes_first, expected in ((False, [(0, 4), (1, 1)]), (True, [(1, 1), (0, 4)])):
        sched = world(11, budget=8, decodes_first=decodes_first, long_prefill_token_threshold=4)
        sched.add_request(make_request(0, 40, output=3))
        sched.add_request(make_request(1, 1, output=5))
        assert step(sched, 1.0)[0] == [(0, 4), (1, 1)]
        assert step(sched, 2.0)[0] == expected


def test_a_finished_request_keeps_its_seat_through_the_next_schedule(make_request):
    """Async scheduling's lag: with one seat, the second request is admitted one step later
    than when the seat is freed at once, and that step schedules nothing."""
    def admitted_at(lag):
        sched = world(11, max_num_seqs=1, finish_lag=lag)
        sched.add_request(make_request(0, 10, output=2))
        sched.add_request(make_request(1, 10, output=2))
        for k in range(1, 8):
            batch, _, _ = step(sched, float(k))
            if 1 in dict(batch):
                return k, sched
    k_now, _ = admitted_at(False)
    k_lag, sched = admitted_at(True)
    assert k_lag == k_now + 1
    assert not sched.lagging and sched.allocator.pool.num_free == 11 - 1


def test_a_finished_request_still_seated_can_be_the_preemption_victim(make_request):
    """Under the lag a request whose last token is in flight is still the tail of ``running``:
    vLLM preempts it like any other (its blocks go), then its output finishes it."""
    from sim.request import RequestStatus

    sched = world(4, finish_lag=True)  # 4 blocks of 16
    sched.add_request(make_request(0, 16, output=5))
    sched.add_request(make_request(2, 16, output=5))
    sched.add_request(make_request(1, 32, output=1))
    _, _, done = step(sched, 1.0)  # all three prefilled: every block taken; 1 is done
    assert [r.request_id for r in done] == [1] and sched.allocator.pool.num_free == 0
    batch, preempted, _ = step(sched, 2.0)  # 0's decode needs a block: the tail (1) gives its two
    assert preempted == [1] and batch == [(0, 1), (2, 1)]
    r1 = done[0]
    assert r1.status is RequestStatus.FINISHED and r1 in sched.finished and r1 not in sched.waiting
    assert r1 not in sched.running and not sched.lagging and sched.allocator.pool.num_free == 0


def test_the_vllm_profile_keeps_one_block_as_the_null_block(scenario_dict):
    for profile, usable in (("vllm-v1", 10), ("sglang", 11), ("eager", 11)):
        parts = build_parts(parse_scenario(scenario_dict(engine={"profile": profile})))
        assert parts.allocator.pool.num_blocks == usable, profile
        assert parts.plan.num_gpu_blocks == 11

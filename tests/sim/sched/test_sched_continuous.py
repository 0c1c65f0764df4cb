"""Continuous batching, chunked prefill and preemption on an 11-block pool (no engine).

A "step" here is what the engine does: ``schedule()`` then ``update_from_output(out, t)``.
"""

from __future__ import annotations

from sim.kv.contiguous import ContiguousAllocator
from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace
from sim.request import RequestStatus
from sim.config.scenario import BatchingPolicy, PreemptionMode
from sim.sched import make_scheduler
from sim.sched.continuous import ContinuousScheduler
from sim.sched.preemption import Preemptor
from sim.sched.static import StaticScheduler

B = 16
BYTES_PER_SLOT = 2.0


def world(*, chunked=False, budget=1000, max_num_seqs=8, max_model_len=1000, reject=False,
          mode=PreemptionMode.RECOMPUTE, swap_bytes=10**9, alloc=None):
    alloc = alloc if alloc is not None else PagedAllocator(11, B)
    swap = SwapSpace(swap_bytes)
    pre = Preemptor(mode, alloc, swap, BYTES_PER_SLOT)
    sched = ContinuousScheduler(alloc, pre, chunked=chunked, max_num_seqs=max_num_seqs,
                                max_num_batched_tokens=budget, max_model_len=max_model_len,
                                reject_when_full=reject)
    return sched


def step(sched, now):
    out = sched.schedule()
    done = sched.update_from_output(out, now)
    sched.allocator.check_invariants()
    sched.preemptor.swap.check_invariants()
    return out, done


def batch(out):
    return [(r.request_id, n) for r, n in out.scheduled]


def test_make_scheduler_picks_the_policy() -> None:
    alloc = PagedAllocator(11, B)
    pre = Preemptor(PreemptionMode.RECOMPUTE, alloc, SwapSpace(0), 1.0)
    limits = dict(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64, reject_when_full=False)
    assert isinstance(make_scheduler(BatchingPolicy.STATIC, alloc, pre, **limits), StaticScheduler)
    cont = make_scheduler(BatchingPolicy.CONTINUOUS, alloc, pre, **limits)
    chunk = make_scheduler(BatchingPolicy.CHUNKED_PREFILL, alloc, pre, **limits)
    assert not cont.chunked and chunk.chunked


def test_prompt_too_long_is_rejected_at_add(make_request) -> None:
    sched = world(max_model_len=64)
    r = make_request(0, 64)
    assert not sched.add_request(r)
    assert r.status is RequestStatus.REJECTED and r.reject_reason == "prompt_too_long"
    assert sched.rejected == [r] and not sched.waiting
    ok = make_request(1, 63)
    assert sched.add_request(ok) and ok.status is RequestStatus.WAITING


def test_request_that_can_never_fit_the_pool_is_rejected_at_add(make_request) -> None:
    sched = world()
    r = make_request(0, 100, max_tokens=100)  # 200 tokens > 176 slots
    assert not sched.add_request(r)
    assert r.reject_reason == "exceeds_kv_pool"


def test_budget_respected_and_whole_prompts_wait(make_request) -> None:
    sched = world(budget=100)
    a, b = make_request(0, 60, output=3), make_request(1, 50, output=3)
    sched.add_request(a)
    sched.add_request(b)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 60)]  # 50 > 40 left: b waits although its KV would fit
    assert list(sched.waiting) == [b]
    out, _ = step(sched, 2.0)
    assert batch(out) == [(0, 1), (1, 50)]
    assert out.num_decode_tokens == 1 and out.num_prefill_tokens == 50


def test_head_of_line_blocking_without_chunking(make_request) -> None:
    sched = world(budget=100)
    for r in (make_request(0, 60), make_request(1, 50), make_request(2, 10)):
        sched.add_request(r)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 60)]  # request 2 would fit but FCFS does not skip ahead


def test_chunked_prefill_splits_to_fill_the_budget(make_request) -> None:
    sched = world(chunked=True, budget=100)
    a, b = make_request(0, 60, output=3), make_request(1, 50, output=3)
    sched.add_request(a)
    sched.add_request(b)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 60), (1, 40)]
    assert out.num_prefill_tokens == 100
    assert b.num_computed_tokens == 40 and b.num_generated == 0  # a chunk samples nothing
    assert b.first_token_s is None and a.first_token_s == 1.0
    out, _ = step(sched, 2.0)
    assert batch(out) == [(0, 1), (1, 10)]  # decodes first, then the rest of the prompt
    assert b.num_generated == 1 and b.first_token_s == 2.0
    assert b.admitted_s == 1.0  # served since its first chunk


def test_chunked_prompt_is_spread_over_steps(make_request) -> None:
    sched = world(chunked=True, budget=30)
    long, short = make_request(0, 100, output=5), make_request(1, 10, output=5)
    sched.add_request(short)
    sched.add_request(long)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(1, 10), (0, 20)]
    out, _ = step(sched, 2.0)
    assert batch(out) == [(1, 1), (0, 29)]
    out, _ = step(sched, 3.0)
    assert batch(out) == [(1, 1), (0, 29)]


def test_chunked_prefill_serves_decodes_before_prefill_chunks(make_request) -> None:
    sched = world(chunked=True, budget=30)
    p, d = make_request(0, 100, output=5), make_request(1, 10, output=5)
    # State built by hand: p (admitted first) is mid-prefill, d is decoding.
    assert sched.allocator.allocate_slots(p, 30)
    p.num_computed_tokens = 30
    sched._mark_admitted(p)
    assert sched.allocator.allocate_slots(d, 10)
    d.num_computed_tokens, d.num_generated = 10, 1
    sched._mark_admitted(d)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(1, 1), (0, 29)]  # FCFS over `running` would give p all 30
    assert out.num_decode_tokens == 1 and out.num_prefill_tokens == 29


def test_continuous_serves_running_in_admission_order(make_request) -> None:
    sched = world(chunked=False, budget=30)
    p, d = make_request(0, 100, output=5), make_request(1, 10, output=5)
    assert sched.allocator.allocate_slots(p, 30)
    p.num_computed_tokens = 30
    sched._mark_admitted(p)
    assert sched.allocator.allocate_slots(d, 10)
    d.num_computed_tokens, d.num_generated = 10, 1
    sched._mark_admitted(d)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 30)]


def test_max_num_seqs_respected(make_request) -> None:
    sched = world(max_num_seqs=2)
    for i in range(3):
        sched.add_request(make_request(i, 10, output=5))
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 10), (1, 10)]
    assert len(sched.running) == 2 and len(sched.waiting) == 1


def test_token_bookkeeping_until_finish(make_request) -> None:
    sched = world()
    r = make_request(0, 20, output=3)
    sched.add_request(r)
    _, done = step(sched, 1.0)
    assert (r.num_computed_tokens, r.num_generated, r.first_token_s) == (20, 1, 1.0)
    assert done == []
    _, done = step(sched, 2.0)
    assert (r.num_computed_tokens, r.num_generated) == (21, 2)
    _, done = step(sched, 3.0)
    assert done == [r]
    assert r.status is RequestStatus.FINISHED
    assert (r.first_token_s, r.last_token_s, r.finish_s) == (1.0, 3.0, 3.0)
    assert sched.allocator.num_allocated_slots() == 0
    assert not sched.has_work() and sched.finished == [r]


def fill_pool(sched, make_request, output=5):
    """A (3 blocks), B (3 blocks), C (5 blocks): the 11-block pool is full after step 1."""
    a, b, c = make_request(0, 48, output=output), make_request(1, 48, output=output), make_request(2, 80, output=output)
    for r in (a, b, c):
        sched.add_request(r)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 48), (1, 48), (2, 80)]
    assert sched.allocator.pool.num_free == 0
    return a, b, c


def test_recompute_preempts_most_recently_admitted(make_request) -> None:
    sched = world()
    a, b, c = fill_pool(sched, make_request)
    d = make_request(3, 10)
    sched.add_request(d)
    out, _ = step(sched, 2.0)
    # A needs a 4th block first; the victim is C (admitted last), not A.
    assert out.preempted == [c] and not out.swapped_out
    assert batch(out) == [(0, 1), (1, 1)]
    alloc = sched.allocator
    assert alloc.block_tables[0] == [0, 1, 2, 10]  # C freed tail first: 10 is the front
    assert alloc.block_tables[1] == [3, 4, 5, 9]
    assert 2 not in alloc.block_tables
    assert c.status is RequestStatus.WAITING and c.num_computed_tokens == 0
    assert c.num_generated == 1 and c.num_tokens == 81  # its sampled token is kept
    assert c.num_preemptions == 1
    # No admission in a step that preempted, although d would have fit.
    assert list(sched.waiting) == [c, d]
    assert sched.preemptor.num_recompute == 1 and sched.preemptor.num_recomputed_tokens == 80


def test_recomputed_request_prefills_prompt_and_output_again(make_request) -> None:
    sched = world()
    a, b, c = fill_pool(sched, make_request, output=2)
    step(sched, 2.0)  # c preempted; a and b sample their 2nd token and finish
    assert sched.finished == [a, b]
    out, _ = step(sched, 3.0)
    assert batch(out) == [(2, 81)]  # the prompt and the token generated before
    assert out.num_prefill_tokens == 81
    assert c.first_token_s == 1.0  # TTFT is not reset by preemption
    assert c.num_generated == 2 and c.status is RequestStatus.FINISHED


def test_victim_is_the_request_itself_when_it_is_last(make_request) -> None:
    sched = world()
    a = make_request(0, 150, output=40, max_tokens=16)  # 10 blocks, room up to 160 tokens
    b = make_request(1, 16, output=40, max_tokens=16)  # 1 block, full
    sched.add_request(a)
    sched.add_request(b)
    step(sched, 1.0)
    assert sched.allocator.pool.num_free == 0
    # a decodes within its blocks; b needs a 2nd block and is itself the lowest priority.
    out, _ = step(sched, 2.0)
    assert out.preempted == [b] and batch(out) == [(0, 1)]
    assert list(sched.waiting) == [b] and b.num_computed_tokens == 0


def test_victim_is_another_request_when_the_first_needs_room(make_request) -> None:
    sched = world()
    a = make_request(0, 160, output=40, max_tokens=16)  # 10 blocks
    b = make_request(1, 16, output=40, max_tokens=16)  # 1 block
    sched.add_request(a)
    sched.add_request(b)
    step(sched, 1.0)
    assert sched.allocator.pool.num_free == 0
    # a needs an 11th block: the lowest priority is b, evicted; then b is not scheduled.
    out, _ = step(sched, 2.0)
    assert out.preempted == [b] and batch(out) == [(0, 1)]


def test_swap_preemption_moves_victim_to_swapped(make_request) -> None:
    sched = world(mode=PreemptionMode.SWAP)
    a, b, c = fill_pool(sched, make_request, output=2)
    out, done = step(sched, 2.0)
    assert out.preempted == [c] and out.swapped_out == [c]
    assert out.swap_out_bytes == 5 * B * BYTES_PER_SLOT  # it held 5 blocks
    assert c.status is RequestStatus.SWAPPED and list(sched.swapped) == [c]
    assert c.num_computed_tokens == 80  # its KV survives on the CPU
    assert sched.preemptor.swap.used_bytes == 160 and c.num_swaps == 1
    assert done == [a, b]
    out, _ = step(sched, 3.0)  # room again: swap in, then a decode of its one new token
    assert out.swapped_in == [c] and out.swap_in_bytes == 160
    assert batch(out) == [(2, 1)] and out.num_decode_tokens == 1
    assert sched.preemptor.swap.used_bytes == 0
    assert c.status is RequestStatus.FINISHED
    assert sched.preemptor.num_swap == 1 and sched.preemptor.num_recompute == 0


def test_swap_falls_back_to_recompute_when_swap_space_is_small(make_request) -> None:
    sched = world(mode=PreemptionMode.SWAP, swap_bytes=100)  # c needs 160 bytes
    a, b, c = fill_pool(sched, make_request)
    out, _ = step(sched, 2.0)
    assert out.preempted == [c] and out.swapped_out == [] and out.swap_out_bytes == 0
    assert c.status is RequestStatus.WAITING and c.num_computed_tokens == 0
    assert list(sched.waiting) == [c] and not sched.swapped
    assert sched.preemptor.num_recompute == 1 and sched.preemptor.num_swap == 0


def test_swap_in_waits_for_room(make_request) -> None:
    sched = world(mode=PreemptionMode.SWAP)
    a, b, c = fill_pool(sched, make_request, output=10)
    step(sched, 2.0)  # c swapped out, a and b hold 4 blocks each: 3 free
    out, _ = step(sched, 3.0)
    assert sched.swapped and out.swapped_in == []  # c needs 6 blocks
    assert batch(out) == [(0, 1), (1, 1)]


def test_reject_when_full(make_request) -> None:
    sched = world(reject=True)
    big, mid, small = make_request(0, 150, output=5), make_request(1, 32), make_request(2, 16)
    for r in (big, mid, small):
        sched.add_request(r)
    out, _ = step(sched, 1.0)
    assert out.rejected == [mid] and mid.reject_reason == "kv_cache_full"
    assert mid.status is RequestStatus.REJECTED and sched.rejected == [mid]
    assert batch(out) == [(0, 150), (2, 16)]  # the next request is still considered


def test_queue_when_full_keeps_waiting(make_request) -> None:
    sched = world(reject=False)
    big, mid = make_request(0, 150, output=5), make_request(1, 32)
    sched.add_request(big)
    sched.add_request(mid)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 150)] and list(sched.waiting) == [mid] and not sched.rejected


def test_contiguous_static_admits_by_reservation(make_request) -> None:
    sched = world(alloc=ContiguousAllocator(176, 80, exact=False), max_model_len=80)
    for i in range(3):
        sched.add_request(make_request(i, 10, output=2))
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 10), (1, 10)]  # 2 x 80 reserved; 16 free slots are not enough
    assert sched.allocator.num_allocated_slots() == 160

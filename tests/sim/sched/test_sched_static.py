"""Static batching on an 11-block pool (no engine): batches form only when idle."""

from __future__ import annotations

from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace
from sim.request import RequestStatus
from sim.config.scenario import PreemptionMode
from sim.sched.preemption import Preemptor
from sim.sched.static import StaticScheduler

B = 16


def world(*, budget=1000, max_num_seqs=8, reject=False, mode=PreemptionMode.RECOMPUTE):
    alloc = PagedAllocator(11, B)
    pre = Preemptor(mode, alloc, SwapSpace(10**9), 2.0)
    return StaticScheduler(alloc, pre, max_num_seqs=max_num_seqs, max_num_batched_tokens=budget,
                           max_model_len=1000, reject_when_full=reject)


def step(sched, now):
    out = sched.schedule()
    done = sched.update_from_output(out, now)
    sched.allocator.check_invariants()
    return out, done


def batch(out):
    return [(r.request_id, n) for r, n in out.scheduled]


def test_batch_prefills_together_padded_to_longest(make_request) -> None:
    sched = world()
    a, b = make_request(0, 20, output=1), make_request(1, 50, output=3)
    sched.add_request(a)
    sched.add_request(b)
    out, done = step(sched, 1.0)
    assert batch(out) == [(0, 20), (1, 50)]
    assert out.prefill_padding_tokens == 30  # a padded to 50
    assert out.num_tokens == 100 and out.num_seqs == 2
    assert done == []  # a has its only token, but answers go out at the batch's end


def test_finished_members_pad_and_finish_together(make_request) -> None:
    sched = world()
    a, b = make_request(0, 20, output=1), make_request(1, 50, output=3)
    sched.add_request(a)
    sched.add_request(b)
    step(sched, 1.0)
    assert a.last_token_s == 1.0 and a.finish_s is None
    assert sched.done_in_batch == [a] and sched.running == [b]
    out, done = step(sched, 2.0)
    assert batch(out) == [(1, 1)]
    assert out.decode_padding_seqs == 1 and out.num_seqs == 2
    assert out.decode_kv_tokens == 51 + 21  # b's context + a's padded row
    assert done == []
    assert sched.allocator.held_slots(a) == 32  # a keeps its KV until the batch ends
    out, done = step(sched, 3.0)
    assert set(done) == {a, b}
    assert a.finish_s == b.finish_s == 3.0
    assert a.last_token_s == 1.0 and b.last_token_s == 3.0
    assert a.status is b.status is RequestStatus.FINISHED
    assert sched.allocator.num_allocated_slots() == 0


def test_new_arrivals_wait_for_the_whole_batch(make_request) -> None:
    sched = world()
    a, b = make_request(0, 20, output=1), make_request(1, 20, output=3)
    sched.add_request(a)
    sched.add_request(b)
    step(sched, 1.0)
    late = make_request(2, 10, output=1)
    sched.add_request(late)  # KV and seq slots are free, yet it waits
    out, _ = step(sched, 2.0)
    assert batch(out) == [(1, 1)] and list(sched.waiting) == [late]
    step(sched, 3.0)  # the batch ends
    out, done = step(sched, 4.0)
    assert batch(out) == [(2, 10)] and done == [late]


def test_batch_respects_max_num_seqs_and_padded_budget(make_request) -> None:
    sched = world(budget=100, max_num_seqs=3)
    for i, n in enumerate((30, 20, 40, 5)):
        sched.add_request(make_request(i, n, output=2))
    out, _ = step(sched, 1.0)
    # 30 + 20: 2 x 30 = 60 <= 100; adding 40 would make 3 x 40 = 120 > 100
    assert batch(out) == [(0, 30), (1, 20)]
    assert out.prefill_padding_tokens == 10


def test_static_reject_when_full(make_request) -> None:
    sched = world(reject=True)
    big, mid, small = make_request(0, 150, output=2), make_request(1, 32), make_request(2, 16)
    for r in (big, mid, small):
        sched.add_request(r)
    out, _ = step(sched, 1.0)
    assert out.rejected == [mid] and mid.reject_reason == "kv_cache_full"
    assert batch(out) == [(0, 150), (2, 16)]


def test_static_queue_when_full_forms_a_smaller_batch(make_request) -> None:
    sched = world(reject=False)
    big, mid = make_request(0, 150, output=2), make_request(1, 32)
    sched.add_request(big)
    sched.add_request(mid)
    out, _ = step(sched, 1.0)
    assert batch(out) == [(0, 150)] and list(sched.waiting) == [mid]


def test_paged_static_batch_preempts_newest_member(make_request) -> None:
    sched = world()
    a, b = make_request(0, 80, output=40, max_tokens=40), make_request(1, 80, output=40, max_tokens=40)
    sched.add_request(a)
    sched.add_request(b)
    step(sched, 1.0)  # 80-token prompts: 5 blocks each, 1 block left
    assert sched.allocator.pool.num_free == 1
    out, _ = step(sched, 2.0)  # both need a 6th block: a gets it, b (newest) is evicted
    assert out.preempted == [b] and batch(out) == [(0, 1)]
    assert list(sched.waiting) == [b] and b.num_computed_tokens == 0

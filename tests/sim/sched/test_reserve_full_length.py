"""Admission that reserves every request's full length (TensorRT-LLM's GUARANTEED_NO_EVICT,
the ``trtllm`` profile's default; ``engine.profile_overrides.reserve_full_length``): a
request is admitted only while its own prompt + max_tokens and every running request's
still fit, so no running request is ever preempted for room."""

from __future__ import annotations

import pytest

from sim.config.scenario import PreemptionMode
from sim.kv.contiguous import ContiguousAllocator
from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace
from sim.sched.continuous import ContinuousScheduler
from sim.sched.preemption import Preemptor
from sim.sched.static import StaticScheduler

B = 16


def world(cls=ContinuousScheduler, *, reserve: bool, blocks: int = 11, **kw):
    alloc = PagedAllocator(blocks, B)
    pre = Preemptor(PreemptionMode.RECOMPUTE, alloc, SwapSpace(10**9), 2.0)
    if cls is ContinuousScheduler:
        kw.setdefault("chunked", False)
    return cls(alloc, pre, max_num_seqs=8, max_num_batched_tokens=1000, max_model_len=1000,
               reject_when_full=False, reserve_full_length=reserve, **kw)


def drain(sched, requests):
    """Run to the end; (most requests running at once, preemptions, finished ids in order)."""
    for r in requests:
        assert sched.add_request(r)
    most, preempted, t = 0, 0, 0.0
    while sched.has_work():
        out = sched.schedule()
        preempted += len(out.preempted)
        most = max(most, len(sched.running))
        if sched.reserve_full_length:  # what admission promised: the running requests' growth fits
            assert sched.reserved_growth() <= sched.allocator.pool.num_free * B
        t += 1.0
        sched.update_from_output(out, t)
        sched.allocator.check_invariants()
    return most, preempted, [r.request_id for r in sched.finished]


def test_growth_slots_counts_the_blocks_still_to_come(make_request) -> None:
    alloc = PagedAllocator(11, B)
    r = make_request(0, 20, output=30, max_tokens=30)  # 50 tokens in all: 4 blocks
    assert alloc.growth_slots(r) == 4 * B  # holds nothing yet
    assert alloc.growth_slots(r, 20) == 2 * B  # after its prompt (2 blocks), 2 to come
    assert alloc.allocate_slots(r, 20)
    assert alloc.held_slots(r) == 2 * B and alloc.growth_slots(r) == 2 * B
    assert alloc.growth_slots(r, 64) == 0  # never negative
    contiguous = ContiguousAllocator(11 * B, 160, exact=True)
    assert contiguous.growth_slots(r) == 0  # it reserves the whole extent at admission


@pytest.mark.parametrize("cls", [ContinuousScheduler, StaticScheduler])
def test_admission_keeps_room_for_every_full_length(make_request, cls) -> None:
    # prompts of 16 tokens that grow to 64 (4 blocks each) in an 11-block pool: on demand,
    # all 6 prompts fit and decoding preempts; reserved, 2 run at a time and none is preempted
    reqs = lambda: [make_request(i, 16, output=48, max_tokens=48) for i in range(6)]  # noqa: E731
    most_on_demand, _, _ = drain(world(cls, reserve=False), reqs())
    sched = world(cls, reserve=True)
    most, _, finished = drain(sched, reqs())
    assert most_on_demand > 2 and most == 2
    assert sorted(finished) == list(range(6)) and not sched.rejected
    assert all(r.num_preemptions == 0 for r in sched.finished)


def test_on_demand_admission_preempts_where_reservation_does_not(make_request) -> None:
    on_demand = world(reserve=False)
    drain(on_demand, [make_request(i, 16, output=48, max_tokens=48) for i in range(6)])
    assert sum(r.num_preemptions for r in on_demand.finished) > 0


def test_a_request_that_cannot_reserve_waits_behind_the_head(make_request) -> None:
    """FCFS: the head waits for room, and nothing behind it is admitted past it."""
    sched = world(reserve=True)
    big = [make_request(i, 16, output=100, max_tokens=100) for i in range(2)]  # 8 blocks each
    small = make_request(2, 16, output=1, max_tokens=1)
    for r in (*big, small):
        sched.add_request(r)
    out = sched.schedule()
    assert [r.request_id for r, _ in out.scheduled] == [0]  # 1's 8 blocks do not fit beside 0's
    assert [r.request_id for r in sched.waiting] == [1, 2]


def test_the_trtllm_profile_reserves_and_others_do_not(scenario_dict, simulate, assert_drained) -> None:
    base = dict(workload={"num_requests": 12, "arrival": {"type": "offline"},
                          "prompt_tokens": {"type": "fixed", "value": 16},
                          "output_tokens": {"type": "fixed", "value": 48}})
    runs = {}
    for name, engine in (("trtllm", {"profile": "trtllm"}),
                         ("trtllm-on-demand", {"profile": "trtllm",
                                               "profile_overrides": {"reserve_full_length": False}}),
                         ("vllm-v1", {"profile": "vllm-v1"}),
                         ("vllm-v1-reserving", {"profile": "vllm-v1",
                                                "profile_overrides": {"reserve_full_length": True}})):
        result, summary = simulate(scenario_dict(engine=engine, **base))
        assert_drained(result, summary)
        assert summary["requests"]["completed"] == 12
        runs[name] = summary
    for name in ("trtllm", "vllm-v1-reserving"):
        assert runs[name]["profile"]["reserve_full_length"] is True
        assert runs[name]["preemptions"]["recompute"] == 0
    for name in ("trtllm-on-demand", "vllm-v1"):
        assert runs[name]["profile"]["reserve_full_length"] is False
        assert runs[name]["preemptions"]["recompute"] > 0

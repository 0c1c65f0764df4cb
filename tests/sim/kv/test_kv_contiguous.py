"""ContiguousAllocator: reservation sizes, first-fit offsets, external fragmentation."""

from __future__ import annotations

import pytest

from sim.kv import make_allocator
from sim.kv.contiguous import ContiguousAllocator
from sim.kv.paged import PagedAllocator
from sim.config.scenario import AllocatorKind


def offset(alloc: ContiguousAllocator, req) -> int:
    return alloc._extents[req.request_id][0]


def test_static_reserves_max_kv_tokens_whatever_the_request(make_request) -> None:
    alloc = ContiguousAllocator(1000, 300, exact=False)
    short = make_request(0, 10, output=2, max_tokens=5)
    assert alloc.reservation(short) == 300
    assert alloc.allocate_slots(short, 10)
    assert alloc.held_slots(short) == 300 and alloc.num_allocated_slots() == 300
    alloc.check_invariants()


def test_exact_reserves_prompt_plus_max_tokens(make_request) -> None:
    alloc = ContiguousAllocator(1000, 300, exact=True)
    r = make_request(0, 40, output=10, max_tokens=60)
    assert alloc.reservation(r) == 100
    assert alloc.allocate_slots(r, 40)
    assert alloc.held_slots(r) == 100
    capped = make_request(1, 250, output=10, max_tokens=200)
    assert alloc.reservation(capped) == 300  # never more than max_kv_tokens
    alloc.check_invariants()


def test_static_pool_fits_floor_of_pool_over_max_len(make_request) -> None:
    alloc = ContiguousAllocator(1000, 300, exact=False)
    reqs = [make_request(i, 10) for i in range(4)]
    assert [alloc.allocate_slots(r, 10) for r in reqs] == [True, True, True, False]
    assert [offset(alloc, r) for r in reqs[:3]] == [0, 300, 600]
    assert alloc.num_allocated_slots() == 900
    assert alloc.num_external_fragmentation_slots() == 0  # one hole of 100
    alloc.check_invariants()


def test_first_fit_offsets_and_external_fragmentation(make_request) -> None:
    alloc = ContiguousAllocator(100, 100, exact=True)

    def req(i, size):
        return make_request(i, size - 1, output=1, max_tokens=1)  # reserves exactly `size`

    a, b, c = req(0, 30), req(1, 20), req(2, 30)
    for r in (a, b, c):
        assert alloc.allocate_slots(r, r.num_prompt_tokens)
        alloc.check_invariants()
    assert [offset(alloc, r) for r in (a, b, c)] == [0, 30, 50]
    assert alloc.num_external_fragmentation_slots() == 0  # one hole [80, 100)

    alloc.free(b)  # holes [30, 50) and [80, 100): 40 free, largest 20
    alloc.check_invariants()
    assert alloc.num_allocated_slots() == 60
    assert alloc.num_external_fragmentation_slots() == 40 - 20

    d = req(3, 25)
    assert not alloc.allocate_slots(d, d.num_prompt_tokens)  # 40 free, no hole of 25
    assert alloc.held_slots(d) == 0 and alloc.num_allocated_slots() == 60

    e = req(4, 15)
    assert alloc.allocate_slots(e, e.num_prompt_tokens)
    assert offset(alloc, e) == 30  # first fit: the lowest hole that is big enough
    assert alloc.num_external_fragmentation_slots() == 5  # holes 5 and 20

    alloc.free(a)  # holes 30, 5, 20
    assert alloc.num_external_fragmentation_slots() == 25
    assert alloc.allocate_slots(d, d.num_prompt_tokens)
    assert offset(alloc, d) == 0
    alloc.check_invariants()

    for r in (c, d, e):
        alloc.free(r)
    assert alloc.num_allocated_slots() == 0
    assert alloc.num_external_fragmentation_slots() == 0
    alloc.check_invariants()


def test_reservation_never_grows(make_request) -> None:
    alloc = ContiguousAllocator(100, 100, exact=True)
    r = make_request(0, 10, output=5, max_tokens=5)  # reserves 15
    assert alloc.allocate_slots(r, 10)
    r.num_computed_tokens, r.num_generated = 10, 1
    assert alloc.allocate_slots(r, 1)  # within the reservation: nothing changes
    assert alloc.held_slots(r) == 15 and alloc.num_allocated_slots() == 15
    with pytest.raises(AssertionError, match="never grows"):
        alloc.allocate_slots(r, 10)


def test_no_prefix_cache_and_fits_alone(make_request) -> None:
    static = ContiguousAllocator(100, 120, exact=False)
    exact = ContiguousAllocator(100, 120, exact=True)
    r = make_request(0, 40, output=5, max_tokens=50)
    assert static.lookup_prefix(r) == 0 and static.num_cached_free_slots() == 0
    assert not static.fits_alone(90, r)  # 120 > 100 whatever the request
    assert exact.fits_alone(90, r)
    assert not exact.fits_alone(90, make_request(1, 40, max_tokens=70))
    with pytest.raises(ValueError, match="num_slots"):
        ContiguousAllocator(0, 10, exact=True)


def test_make_allocator_gives_every_kind_the_same_pool() -> None:
    kinds = {k: make_allocator(k, num_blocks=11, block_size=16, max_kv_tokens=64)
             for k in AllocatorKind}
    assert {a.num_total_slots for a in kinds.values()} == {176}
    assert isinstance(kinds[AllocatorKind.PAGED], PagedAllocator)
    assert kinds[AllocatorKind.CONTIGUOUS_EXACT].exact
    assert not kinds[AllocatorKind.CONTIGUOUS_STATIC].exact

"""The CPU tier (sim/kv/offload.py): its LRU at capacity, pins, what the GPU pool stores in it,
and the allocator's lookup and load of tier blocks."""

from __future__ import annotations

import pytest

from sim.kv.offload import HostTier, OffloadPagedAllocator, TierSpec

B = 16


def tier(capacity: int, reused_only: bool = False) -> HostTier:
    return HostTier(TierSpec(capacity, block_bytes=1000, bandwidth_bytes_per_s=1e6, latency_s=0.5,
                             store_reused_only=reused_only))


def test_lru_evicts_least_recent_at_capacity() -> None:
    t = tier(3)
    t.store([1, 2, 3])
    assert t.lookup([1]) == 1  # 1 becomes the most recent: 2 goes first
    t.store([4])
    assert 2 not in t and all(h in t for h in (1, 3, 4))
    t.store([5, 6])
    assert [h for h in (1, 3, 4, 5, 6) if h in t] == [4, 5, 6]
    assert (t.num_stored, t.num_evicted, t.num_resident, t.peak_resident) == (6, 3, 3, 3)
    assert t.bytes_stored == 6000
    # one transfer per store call: latency + bytes / bandwidth
    assert t.store_busy_s == pytest.approx(3 * 0.5 + 6000 / 1e6)
    t.check_invariants()


def test_store_of_a_resident_hash_moves_nothing() -> None:
    t = tier(2)
    t.store([1, 2])
    t.store([1])
    assert (t.num_stored, t.bytes_stored) == (2, 2000)
    t.store([3])  # 2 is now the least recent
    assert 1 in t and 2 not in t


def test_pinned_blocks_are_never_evicted() -> None:
    t = tier(2)
    t.store([1, 2])
    t.pin([1, 2])
    t.store([3])
    assert t.num_store_skipped == 1 and 3 not in t and t.num_resident == 2
    t.unpin([1])
    t.store([3])
    assert 1 not in t and 3 in t
    t.check_invariants()


def test_lookup_stops_at_the_first_miss() -> None:
    t = tier(8)
    t.store([1, 2, 4])
    assert t.lookup([1, 2, 3, 4]) == 2
    assert t.lookup([3, 4]) == 0


def _alloc(num_blocks: int, capacity: int, reused_only: bool = False) -> OffloadPagedAllocator:
    return OffloadPagedAllocator(num_blocks, B, tier(capacity, reused_only))


def test_evicted_cached_blocks_go_to_the_tier_and_load_back(make_request) -> None:
    alloc = _alloc(num_blocks=4, capacity=8)
    a = make_request(1, 64)  # 4 full blocks of its own segment
    assert alloc.allocate_slots(a, 64)
    a.num_computed_tokens = 64
    alloc.free(a)  # hashed and cached, then free
    b = make_request(2, 64)  # evicts all four of a's blocks
    assert alloc.allocate_slots(b, 64)
    assert alloc.tier.num_stored == 4 and alloc.tier.bytes_stored == 4000
    alloc.check_invariants()
    b.num_computed_tokens = 64
    alloc.free(b)
    again = make_request(3, ((1001, 64),))  # a's prompt once more
    assert alloc.lookup_prefix(again) == 0  # gone from the GPU
    assert alloc.lookup_tier(again, 0) == (3, 3)  # the last block is always computed
    assert alloc.begin_load(again, 0, 3)
    assert alloc.lookup_prefix(make_request(4, ((1001, 64),))) == 0  # not findable mid-load
    assert alloc.end_load(again) == 48
    assert alloc.lookup_prefix(make_request(5, ((1001, 64),))) == 48  # cached on the GPU now
    alloc.check_invariants()


def test_store_reused_keeps_only_blocks_hit_before(make_request) -> None:
    alloc = _alloc(num_blocks=4, capacity=8, reused_only=True)
    a = make_request(1, 32)
    assert alloc.allocate_slots(a, 32)
    a.num_computed_tokens = 32
    alloc.free(a)
    hit = make_request(2, ((1001, 32), (9, 16)))  # a's two blocks, then its own
    assert alloc.lookup_prefix(hit) == 32
    assert alloc.allocate_slots(hit, 16, 32)
    hit.num_computed_tokens = 48
    alloc.free(hit)
    c = make_request(3, 64)  # evicts all: only a's two blocks were hit
    assert alloc.allocate_slots(c, 64)
    assert alloc.tier.num_stored == 2
    alloc.check_invariants()


def test_begin_load_refuses_without_room(make_request) -> None:
    alloc = _alloc(num_blocks=4, capacity=8)
    a = make_request(1, 64)
    assert alloc.allocate_slots(a, 64)
    a.num_computed_tokens = 64
    alloc.free(a)
    b = make_request(2, 64)
    assert alloc.allocate_slots(b, 64)  # holds every block
    again = make_request(3, ((1001, 64),))
    alloc.lookup_prefix(again)
    assert alloc.lookup_tier(again, 0) == (3, 3)
    assert not alloc.begin_load(again, 0, 3)
    assert alloc.tier._pins == {}
    alloc.check_invariants()

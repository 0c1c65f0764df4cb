"""``kv.offload``'s ``warm: true`` (sim/kv/host_tier.py HostTier.warm): a CPU tier that starts the
run as a warm-up run of the same requests left it (vLLM's offloading blog's benchmarks)."""

from __future__ import annotations

import pytest

from sim.config.offload_schema import OffloadConfig
from sim.kv.offload import HostTier, OffloadPagedAllocator, TierSpec
from sim.request import Request

B = 16


def tier(capacity: int, warm: bool = True) -> HostTier:
    return HostTier(TierSpec(capacity, block_bytes=1000, bandwidth_bytes_per_s=1e6, latency_s=0.5, warm=warm))


def test_warm_blocks_are_resident_without_stores_or_link_time() -> None:
    t = tier(4)
    t.warm([1, 2, 3])
    assert all(h in t for h in (1, 2, 3))
    assert (t.num_warmed, t.num_stored, t.bytes_stored, t.store_busy_s) == (3, 0, 0, 0.0)
    t.warm([2, 3])  # resident already: nothing more
    assert t.num_warmed == 3
    t.check_invariants()


def test_warm_past_capacity_evicts_least_recent_and_stops_on_pins() -> None:
    t = tier(2)
    t.warm([1, 2])
    t.pin([1, 2])
    t.warm([3])  # both pinned: nothing to evict, 3 is not put in
    assert 3 not in t and t.num_warmed == 2
    t.unpin([1])
    t.warm([3])
    assert 1 not in t and 3 in t and t.num_evicted == 1
    t.check_invariants()  # stored + warmed - evicted == resident


def test_allocator_lookup_warms_a_fresh_request_once() -> None:
    t = tier(1000)
    alloc = OffloadPagedAllocator(64, B, t)
    req = Request(0, 0.0, ((7, 5 * B + 3),), 1, 1)
    req.own_from = 0  # a unique prompt: its tokens are its own (a run before this one computed them too)
    cached = alloc.lookup_prefix(req)
    assert cached == 0
    looked, hits = alloc.lookup_tier(req, cached)
    assert looked == hits == 5  # every full prompt block; the partial last one is computed
    assert t.num_warmed == 5 and t.num_stored == 0
    alloc.lookup_tier(req, cached)  # looked up again (waiting for room): not warmed again
    assert t.num_warmed == 5


def test_without_warm_a_fresh_request_finds_nothing() -> None:
    t = tier(1000, warm=False)
    alloc = OffloadPagedAllocator(64, B, t)
    req = Request(0, 0.0, ((7, 5 * B + 3),), 1, 1)
    assert alloc.lookup_tier(req, alloc.lookup_prefix(req))[1] == 0
    assert t.num_resident == 0


def test_warm_is_the_cpu_tiers_only() -> None:
    assert OffloadConfig(tier="cpu", capacity_gb=1, warm=True).warm
    with pytest.raises(ValueError, match="warm is the CPU tier's"):
        OffloadConfig(tier="disk", capacity_gb=1, warm=True)

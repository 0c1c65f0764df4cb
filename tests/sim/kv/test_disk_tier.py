"""A disk tier below the CPU tier (sim/kv/offload.py, #43): what the CPU tier's LRU evicts is
demoted to it in LRU order, a lookup continues into it by the same hashes, a disk hit is read
(latency + bytes / read bandwidth) before the host-to-device copy of the whole load, and every
block a tier took is resident in exactly one of them, or was dropped, after every operation."""

from __future__ import annotations

import pytest

from sim.kv.offload import HostTier, OffloadPagedAllocator, TierSpec

B = 16
BLOCK = 1000  # bytes per block
PCIE, PCIE_LAT = 1e6, 0.5
READ, WRITE, DISK_LAT = 2e5, 1e5, 0.25


def chain(cpu_blocks: int, disk_blocks: int) -> HostTier:
    cpu = HostTier(TierSpec(cpu_blocks, BLOCK, PCIE, PCIE_LAT))
    cpu.lower = HostTier(TierSpec(disk_blocks, BLOCK, READ, DISK_LAT, write_bandwidth_bytes_per_s=WRITE, name="disk"))
    return cpu


def places(cpu: HostTier, hashes) -> dict[int, str]:
    """Where each hash a tier took is now: cpu, disk or dropped (never two places)."""
    out = {}
    for h in hashes:
        where = [name for name, t in (("cpu", cpu), ("disk", cpu.lower)) if h in t]
        assert len(where) <= 1, f"hash {h} in {where}"
        out[h] = where[0] if where else "dropped"
    return out


def test_cpu_evictions_are_demoted_to_disk_in_lru_order() -> None:
    t = chain(cpu_blocks=2, disk_blocks=3)
    t.store([1, 2])
    assert t.lookup([1]) == 1  # 1 is now the CPU tier's most recent: 2 leaves first
    t.store([3])
    assert places(t, [1, 2, 3]) == {1: "cpu", 2: "disk", 3: "cpu"}
    t.store([4, 5])  # evicts 1, then 3 (one write of both)
    assert places(t, [1, 2, 3, 4, 5]) == {1: "disk", 2: "disk", 3: "disk", 4: "cpu", 5: "cpu"}
    assert list(t.lower._lru) == [2, 1, 3]  # the disk's LRU order: demotion order
    t.store([6])  # demotes 4; the disk is full: its least recent (2) is dropped
    assert places(t, range(1, 7)) == {1: "disk", 2: "dropped", 3: "disk", 4: "disk", 5: "cpu", 6: "cpu"}
    disk = t.lower
    assert (t.num_demoted, disk.num_stored, disk.num_evicted) == (4, 4, 1)
    # each demotion batch is one disk write: latency + bytes / write bandwidth
    assert disk.bytes_stored == 4 * BLOCK
    assert disk.store_busy_s == pytest.approx(3 * DISK_LAT + 4 * BLOCK / WRITE)
    # the CPU tier's own stores still cost the host link's figures
    assert t.store_busy_s == pytest.approx(4 * PCIE_LAT + 6 * BLOCK / PCIE)
    t.check_invariants()


def test_lookup_continues_on_disk_and_stops_at_the_first_miss() -> None:
    t = chain(cpu_blocks=2, disk_blocks=8)
    t.store([1, 2, 3, 4])  # 1 and 2 demoted
    assert places(t, [1, 2, 3, 4]) == {1: "disk", 2: "disk", 3: "cpu", 4: "cpu"}
    assert t.lookup([1, 2, 3, 4, 9, 1]) == 4
    assert t.lookup([3, 7, 1]) == 1
    assert t.lookup([7]) == 0


def test_storing_a_hash_the_disk_holds_moves_it_up() -> None:
    t = chain(cpu_blocks=2, disk_blocks=8)
    t.store([1, 2, 3])  # 1 on disk
    t.store([1])  # the GPU evicts block 1 again: it goes to the CPU tier, off the disk (demoting 2)
    assert places(t, [1, 2, 3]) == {1: "cpu", 2: "disk", 3: "cpu"}
    assert t.lower.num_superseded == 1
    t.check_invariants()


def test_a_hash_being_read_from_disk_stays_there() -> None:
    t = chain(cpu_blocks=1, disk_blocks=8)
    t.store([1, 2])  # 1 on disk
    assert t.pin([1, 2]) == 1  # one of them is on disk
    t.store([1])
    assert places(t, [1, 2]) == {1: "disk", 2: "cpu"}
    assert t.loading_any([1]) and t.loading_any([2])
    t.unpin([1, 2])
    assert t._pins == {} and t.lower._pins == {}
    t.check_invariants()


def test_pinned_disk_blocks_are_never_dropped() -> None:
    t = chain(cpu_blocks=1, disk_blocks=1)
    t.store([1, 2])  # 1 on disk
    t.pin([1])
    t.store([3])  # demotes 2: the disk is full of the pinned 1
    assert places(t, [1, 2, 3]) == {1: "disk", 2: "dropped", 3: "cpu"}
    assert t.lower.num_store_skipped == 1
    t.check_invariants()


def test_a_disk_hit_loads_over_disk_then_pcie(make_request) -> None:
    """Three blocks looked up past the GPU: one in the CPU tier, two on disk. The load reads the
    two from disk (one read: latency + 2 blocks / read bandwidth), then copies all three to the
    GPU (latency + 3 blocks / PCIe bandwidth)."""
    alloc = OffloadPagedAllocator(4, B, chain(cpu_blocks=1, disk_blocks=8))
    a = make_request(1, 64)
    assert alloc.allocate_slots(a, 64)
    a.num_computed_tokens = 64
    alloc.free(a)
    b = make_request(2, 64)  # evicts a's four blocks, tail first: the CPU tier keeps the first, the disk the rest
    assert alloc.allocate_slots(b, 64)
    b.num_computed_tokens = 64
    alloc.free(b)
    again = make_request(3, ((1001, 64),))
    assert alloc.lookup_prefix(again) == 0
    assert places(alloc.tier, again.block_hashes[:4]) == dict(zip(again.block_hashes, ["cpu", "disk", "disk", "disk"]))
    assert alloc.lookup_tier(again, 0) == (3, 3)  # the last token's block is always computed
    assert alloc.begin_load(again, 0, 3)
    disk_s, link_s = alloc.count_load(again, 3)
    assert disk_s == pytest.approx(DISK_LAT + 2 * BLOCK / READ)
    assert link_s == pytest.approx(PCIE_LAT + 3 * BLOCK / PCIE)
    disk = alloc.tier.lower
    assert (disk.num_hit_blocks, disk.num_loads, disk.bytes_loaded) == (2, 1, 2 * BLOCK)
    assert alloc.tier.bytes_loaded == 3 * BLOCK  # every loaded block crosses the host link
    assert alloc.end_load(again) == 48
    assert disk._pins == {} and alloc._below == {}
    alloc.check_invariants()


def test_a_cpu_only_load_reads_nothing_from_disk(make_request) -> None:
    alloc = OffloadPagedAllocator(4, B, chain(cpu_blocks=8, disk_blocks=8))
    a = make_request(1, 64)
    assert alloc.allocate_slots(a, 64)
    a.num_computed_tokens = 64
    alloc.free(a)
    b = make_request(2, 64)
    assert alloc.allocate_slots(b, 64)
    again = make_request(3, ((1001, 64),))
    alloc.lookup_prefix(again)
    b.num_computed_tokens = 64
    alloc.free(b)
    assert alloc.begin_load(again, 0, 3)
    assert alloc.count_load(again, 3) == (0.0, pytest.approx(PCIE_LAT + 3 * BLOCK / PCIE))
    assert alloc.tier.lower.num_loads == 0

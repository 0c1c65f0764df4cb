"""The contents and counters of one lower KV tier (sim/kv/offload.py, #43): a CPU tier, and
optionally a disk tier below it (``HostTier.lower``).

Only which chained block hashes are resident is modelled, never their content: a capacity in
blocks, the tier's own LRU order, pins (a hash a load is reading is never evicted), and what
crossed the tier's link each way, in blocks, bytes and link seconds.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class TierSpec:
    """What a tier is: sizes and the link it sits behind (from ``kv.offload`` and the plan)."""

    capacity_blocks: int
    block_bytes: int  # KV bytes of one block (every layer, K and V)
    bandwidth_bytes_per_s: float  # host link, each direction
    latency_s: float  # fixed cost of one transfer (a batch of blocks)
    store_reused_only: bool = False  # ``store: reused``
    write_bandwidth_bytes_per_s: float = 0.0  # stores into the tier (0: ``bandwidth_bytes_per_s``; a disk's writes)
    name: str = "cpu"
    warm: bool = False  # ``warm: true``: every request's prompt blocks are resident when it first looks


class HostTier:
    """The CPU tier's contents and counters. ``stored - evicted == resident`` always."""

    def __init__(self, spec: TierSpec) -> None:
        if spec.capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0, got {spec.capacity_blocks}")
        self.spec = spec
        self.capacity_blocks = spec.capacity_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()  # hash -> None, least recent first
        self._pins: dict[int, int] = {}  # hash -> loads in flight reading it
        self.num_stored = 0  # blocks written into the tier
        self.num_evicted = 0  # blocks its LRU dropped
        self.num_store_skipped = 0  # stores dropped: the tier was full of pinned blocks
        self.num_lookups = 0  # admissions that looked it up
        self.num_lookup_blocks = 0  # blocks looked up there (past the GPU hits)
        self.num_hit_blocks = 0
        self.num_loads = 0  # transfers back to the GPU
        self.bytes_stored = 0
        self.bytes_loaded = 0
        self.store_busy_s = 0.0  # device -> host link time of the stores
        self.load_busy_s = 0.0  # host -> device link time of the loads
        self.peak_resident = 0
        self.lower: HostTier | None = None  # the next tier (a disk): what this one evicts is demoted there
        self.num_demoted = 0  # evicted blocks handed to ``lower``
        self.num_superseded = 0  # blocks dropped because the tier above stored their hash again
        self.num_warmed = 0  # blocks put in by ``warm`` (a warm-up run before the one measured), not stores
        self.on_write = None  # a disk tier: the engine queues each write on the drive (``on_write(seconds)``)
        self.read_wait_s = 0.0  # a disk tier: seconds its reads waited for the drive (behind writes and reads)

    @property
    def num_resident(self) -> int:
        return len(self._lru)

    def __contains__(self, h: int) -> bool:
        return h in self._lru

    def transfer_s(self, num_blocks: int) -> float:
        spec = self.spec
        return spec.latency_s + num_blocks * spec.block_bytes / spec.bandwidth_bytes_per_s

    def store(self, hashes: list[int]) -> None:
        """Write the evicted GPU blocks of ``hashes`` (one transfer; asynchronous in the engine
        modelled: it holds the device-to-host direction, never compute). A hash already
        resident only becomes the most recent; one the lower tier holds moves up (unless a
        load is reading it there: it stays there). What the LRU evicts meanwhile is demoted
        to the lower tier in one transfer."""
        lru, new, lower = self._lru, 0, self.lower
        demoted: list[int] | None = [] if lower is not None else None
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
                continue
            if lower is not None and h in lower._lru:
                if h in lower._pins:
                    continue
                lower.discard(h)
            if len(lru) >= self.capacity_blocks and not self._evict_one(demoted):
                self.num_store_skipped += 1
                continue
            lru[h] = None
            new += 1
        if new:
            self.num_stored += new
            self.bytes_stored += new * self.spec.block_bytes
            seconds = self.write_s(new)
            self.store_busy_s += seconds
            if self.on_write is not None:
                self.on_write(seconds)
            if len(lru) > self.peak_resident:
                self.peak_resident = len(lru)
        if demoted:  # (a hash this call evicted and stored again stays here: it is demoted once at most)
            demoted = [h for h in dict.fromkeys(demoted) if h not in lru]
            self.num_demoted += len(demoted)
            lower.store(demoted)

    def warm(self, hashes: list[int]) -> None:
        """Make ``hashes`` resident as a warm-up run before this one would have left them (no
        link time, not counted as stores): ``warm: true``, the benchmark that runs its requests
        once to fill the tier and measures the second run (vLLM's offloading connector blog)."""
        lru = self._lru
        for h in hashes:
            if h in lru:
                continue
            if len(lru) >= self.capacity_blocks and not self._evict_one():
                break
            lru[h] = None
            self.num_warmed += 1
        if len(lru) > self.peak_resident:
            self.peak_resident = len(lru)

    def write_s(self, num_blocks: int) -> float:
        spec = self.spec
        bandwidth = spec.write_bandwidth_bytes_per_s or spec.bandwidth_bytes_per_s
        return spec.latency_s + num_blocks * spec.block_bytes / bandwidth

    def _evict_one(self, demoted: list[int] | None = None) -> bool:
        """Drop the least recently used unpinned block (onto ``demoted``, the lower tier's, if
        given); False if every block is pinned."""
        for h in self._lru:
            if h not in self._pins:
                del self._lru[h]
                self.num_evicted += 1
                if demoted is not None:
                    demoted.append(h)
                return True
        return False

    def discard(self, h: int) -> None:
        """The tier above stored ``h`` again: this copy goes (a hash is in one lower tier at most)."""
        del self._lru[h]
        self.num_superseded += 1

    def lookup(self, hashes: list[int]) -> int:
        """How many of ``hashes`` (the blocks after the GPU hits, in order) are resident from
        the first on; those become the most recent. Counted by ``count_lookup``, once the
        request is admitted (a request that waits for room looks up again)."""
        lru, n, lower = self._lru, 0, self.lower
        if lower is not None:
            return self._lookup_chain(hashes, lower)
        for h in hashes:
            if h not in lru:
                break
            lru.move_to_end(h)
            n += 1
        return n

    def _lookup_chain(self, hashes: list[int], lower: HostTier) -> int:
        """``lookup`` through this tier and the lower one: each next hash in either."""
        lru, below, n = self._lru, lower._lru, 0
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
            elif h in below:
                below.move_to_end(h)
            else:
                break
            n += 1
        return n

    def count_lookup(self, num_blocks: int, num_hits: int) -> None:
        self.num_lookups += 1
        self.num_lookup_blocks += num_blocks
        self.num_hit_blocks += num_hits

    def pin(self, hashes: list[int]) -> int:
        """Pin ``hashes`` (resident here or, with a lower tier, there) for a load; returns how
        many of them the lower tier holds (its reads)."""
        lower, below = self.lower, 0
        for h in hashes:
            tier = self
            if lower is not None and h not in self._lru:
                tier, below = lower, below + 1
            tier._pins[h] = tier._pins.get(h, 0) + 1
        return below

    def loading_any(self, hashes: list[int]) -> bool:
        """Whether a load in flight reads any of ``hashes``."""
        pins = self._pins
        if self.lower is not None and self.lower.loading_any(hashes):
            return True
        return bool(pins) and any(h in pins for h in hashes)

    def unpin(self, hashes: list[int]) -> None:
        pins = self._pins
        if self.lower is not None:
            below = [h for h in hashes if h not in pins]
            if below:
                self.lower.unpin(below)
                hashes = [h for h in hashes if h in pins]
        for h in hashes:
            left = pins[h] - 1
            if left:
                pins[h] = left
            else:
                del pins[h]

    def count_load(self, num_blocks: int) -> float:
        """Count one load of ``num_blocks``; the seconds it holds the host-to-device link."""
        seconds = self.transfer_s(num_blocks)
        self.num_loads += 1
        self.bytes_loaded += num_blocks * self.spec.block_bytes
        self.load_busy_s += seconds
        return seconds

    def check_invariants(self) -> None:
        assert len(self._lru) <= self.capacity_blocks, "tier over capacity"
        assert self.num_stored + self.num_warmed - self.num_evicted - self.num_superseded == len(self._lru), \
            "a tier block is lost or double-counted"
        if self.lower is not None:
            self.lower.check_invariants()
            assert not any(h in self.lower._lru for h in self._lru), "a hash in two lower tiers"
            assert self.lower.num_stored + self.lower.num_store_skipped == self.num_demoted, \
                "a demoted block is neither on disk nor counted as dropped"
        assert all(h in self._lru for h in self._pins), "a pinned block left the tier"
        assert self.peak_resident >= len(self._lru), "peak below resident"

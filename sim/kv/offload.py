"""A lower KV tier (CPU memory) behind the GPU prefix cache (#43).

vLLM's native KV offloading (``--kv-offloading-size``) keeps KV blocks the GPU pool lets go
of in pinned host memory and loads them back instead of prefilling them again. Here:

* :class:`HostTier` is the tier: a capacity in blocks, the chained block hashes it holds
  (content is never modelled, only which prefixes are resident), its own LRU order, and
  the counters of what crossed the link. A hash being loaded is pinned: the tier's LRU
  never evicts it mid-load. A CPU tier may have a ``lower`` one (a disk): what its LRU
  evicts is demoted there (SGLang HiCache's host-to-storage backup on eviction), a lookup
  continues there by the same hashes, and a hash is in at most one of them (a GPU block
  the CPU tier stores again takes its hash up from the disk).
* :class:`OffloadBlockPool` is the GPU pool that hands each cached block it evicts to the
  tier (``store: evicted``: every one; ``reused``: only blocks whose hash was hit at least
  once), unless another GPU block still holds the same hash.
* :class:`OffloadPagedAllocator` continues the GPU prefix lookup into the tier by the same
  chained hashes (``lookup_tier``), allocates GPU blocks for the hits (``begin_load``) and
  caches them once the load is done (``end_load``).

Time is not known here: the tier counts bytes and link seconds, the scheduler holds a
loading request back, and the engine (sim/engine/simulation.py) runs the load on the link.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from sim.kv.block_pool import ANON, BlockPool
from sim.kv.eviction import PrefixEviction
from sim.kv.paged import PagedAllocator
from sim.kv.token_budget import TokenBudget
from sim.request import Request


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
            self.store_busy_s += self.write_s(new)
            if len(lru) > self.peak_resident:
                self.peak_resident = len(lru)
        if demoted:  # (a hash this call evicted and stored again stays here: it is demoted once at most)
            demoted = [h for h in dict.fromkeys(demoted) if h not in lru]
            self.num_demoted += len(demoted)
            lower.store(demoted)

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
        assert self.num_stored - self.num_evicted - self.num_superseded == len(self._lru), \
            "a tier block is lost or double-counted"
        if self.lower is not None:
            self.lower.check_invariants()
            assert not any(h in self.lower._lru for h in self._lru), "a hash in two lower tiers"
            assert self.lower.num_stored + self.lower.num_store_skipped == self.num_demoted, \
                "a demoted block is neither on disk nor counted as dropped"
        assert all(h in self._lru for h in self._pins), "a pinned block left the tier"
        assert self.peak_resident >= len(self._lru), "peak below resident"


class OffloadBlockPool(BlockPool):
    """A :class:`BlockPool` whose evicted cached blocks go to ``tier``."""

    def __init__(self, num_blocks: int, eviction: PrefixEviction, unhashed_first: bool,
                 duplicates: bool, tier: HostTier) -> None:
        super().__init__(num_blocks, eviction, unhashed_first, duplicates)
        self.tier = tier
        self._reused_only = tier.spec.store_reused_only
        self.hit = bytearray(num_blocks)  # 1: the block's hash was hit since it was cached

    def touch(self, block: int) -> None:
        super().touch(block)
        self.hit[block] = 1

    def drop_hash(self, block: int) -> None:
        super().drop_hash(block)
        self.hit[block] = 0  # its content is never findable: a later hash starts unhit

    def _evict(self, blocks: list[int], hashes: list) -> None:
        super()._evict(blocks, hashes)
        hit, get = self.hit, self._cached.get
        keep = []
        for block, h in zip(blocks, hashes):
            if h is not None and h != ANON and get(h) is None and (hit[block] or not self._reused_only):
                keep.append(h)
            hit[block] = 0
        if keep:
            self.tier.store(keep)


class OffloadPagedAllocator(PagedAllocator):
    """A :class:`PagedAllocator` with prefix caching over a :class:`HostTier`."""

    def __init__(self, num_blocks: int, block_size: int, tier: HostTier,
                 eviction: PrefixEviction = PrefixEviction.LRU, budget: TokenBudget = TokenBudget(),
                 unhashed_first: bool = False) -> None:
        super().__init__(num_blocks, block_size, True, eviction, budget, unhashed_first)
        self.tier = tier
        self.pool = OffloadBlockPool(num_blocks, eviction, unhashed_first, unhashed_first, tier)
        self._loading: dict[int, int] = {}  # request_id -> blocks being loaded (after its GPU hits)
        self._below: dict[int, int] = {}  # request_id -> of those, blocks read from the lower tier (a disk)

    def count_load(self, req: Request, num_blocks: int) -> tuple[float, float]:
        """Count the load ``begin_load`` started: (seconds reading the lower tier's blocks into
        host memory, 0 without any; seconds of the host-to-device copy of all ``num_blocks``)."""
        below = self._below.get(req.request_id, 0)
        disk_s = self.tier.lower.count_load(below) if below else 0.0
        return disk_s, self.tier.count_load(num_blocks)

    def lookup_tier(self, req: Request, cached_tokens: int) -> tuple[int, int]:
        """(blocks looked up, of which the tier holds from the first on) after the
        ``cached_tokens`` GPU hits of a fresh ``req`` (``lookup_prefix`` first: it hashed the
        blocks a lookup may reach)."""
        B = self.block_size
        max_blocks = (req.num_tokens - 1) // B
        own = self._own_block(req)
        if own < max_blocks:
            max_blocks = own
        start = cached_tokens // B
        if start >= max_blocks:
            return 0, 0
        return max_blocks - start, self.tier.lookup(req.block_hashes[start:max_blocks])

    def hits_loading(self, req: Request, cached_tokens: int, num_blocks: int) -> bool:
        """Whether another request's load in flight is bringing any of the ``num_blocks`` tier
        hits after ``req``'s GPU hits to the GPU (vLLM's connector then defers the request)."""
        start = cached_tokens // self.block_size
        return self.tier.loading_any(req.block_hashes[start:start + num_blocks])

    def begin_load(self, req: Request, cached_tokens: int, num_blocks: int, keep_free_slots: int = 0) -> bool:
        """Take ``req``'s GPU hits and ``num_blocks`` fresh blocks for the tier's (pinned until
        ``end_load``); False (nothing changed) if they do not fit. The loaded blocks get their
        hashes when the load is done: until then no lookup finds them."""
        B, pool = self.block_size, self.pool
        start = cached_tokens // B
        cached_blocks = [pool.get_cached(h) for h in req.block_hashes[:start]]
        revived = sum(1 for b in cached_blocks if pool.ref_cnt[b] == 0)
        if num_blocks > pool.num_free - revived - -(-keep_free_slots // B):
            return False
        below = self.tier.pin(req.block_hashes[start:start + num_blocks])
        if below:
            self._below[req.request_id] = below
            self.tier.lower.num_hit_blocks += below
        self.num_queried_tokens += req.num_tokens
        self.num_hit_tokens += cached_tokens
        for b in cached_blocks:
            pool.touch(b)
        self.block_tables[req.request_id] = cached_blocks + pool.pop_free_many(num_blocks)
        self._num_registered[req.request_id] = start
        self._loading[req.request_id] = num_blocks
        return True

    def end_load(self, req: Request) -> int:
        """The load of ``req``'s tier blocks is done: cache them; returns the tokens now on the GPU."""
        num_blocks = self._loading.pop(req.request_id)
        if self._below:
            self._below.pop(req.request_id, None)
        table = self.block_tables[req.request_id]
        start = self._num_registered[req.request_id]
        stop = start + num_blocks
        self.tier.unpin(req.block_hashes[start:stop])
        self._hash_blocks(req, table, start, stop)
        for b in table[start:stop]:
            self.pool.hit[b] = 1  # hit in the tier: ``store: reused`` keeps it when evicted again
        self._num_registered[req.request_id] = stop
        self._set_room(req, table)
        return stop * self.block_size

    @property
    def num_loading(self) -> int:
        return len(self._loading)

    def check_invariants(self) -> None:
        super().check_invariants()
        self.tier.check_invariants()

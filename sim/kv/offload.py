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

from sim.kv.block_pool import ANON, BlockPool
from sim.kv.eviction import PrefixEviction
from sim.kv.hashing import extend_block_hashes
from sim.kv.host_tier import HostTier, TierSpec  # noqa: F401 (re-exported: the tier itself lives there)
from sim.kv.paged import PagedAllocator
from sim.kv.token_budget import TokenBudget
from sim.request import Request


class OffloadBlockPool(BlockPool):
    """A :class:`BlockPool` whose evicted cached blocks go to ``tier``."""

    def __init__(self, num_blocks: int, eviction: PrefixEviction, unhashed_first: bool,
                 duplicates: bool, tier: HostTier) -> None:
        super().__init__(num_blocks, eviction, unhashed_first, duplicates)
        self.tier = tier
        self._reused_only = tier.spec.store_reused_only
        self.hit = bytearray(num_blocks)  # 1: the block's hash was hit since it was cached
        self.record: list | None = None  # a list: (block, hash) of each block stored (sim validate copies them)

    def touch(self, block: int) -> None:
        super().touch(block)
        self.hit[block] = 1

    def drop_hash(self, block: int) -> None:
        super().drop_hash(block)
        self.hit[block] = 0  # its content is never findable: a later hash starts unhit

    def _evict(self, blocks: list[int], hashes: list, evicted: int) -> None:
        super()._evict(blocks, hashes, evicted)
        hit, get = self.hit, self._cached.get
        keep = []
        for block, h in zip(blocks, hashes):
            if h is not None and h != ANON and get(h) is None and (hit[block] or not self._reused_only):
                keep.append(h)
                if self.record is not None:
                    self.record.append((block, h))
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
        self._warmed: set[int] = set()  # ``warm: true``: requests whose prompt blocks were put in the tier

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
        B, warm = self.block_size, self.tier.spec.warm
        max_blocks = (req.num_tokens - 1) // B
        own = self._own_block(req)  # (warm: a run before this one computed them all)
        if own < max_blocks and not (warm and req.admitted_s is None):
            max_blocks = own
        start = cached_tokens // B
        if start >= max_blocks:
            return 0, 0
        if warm and req.request_id not in self._warmed:
            self._warmed.add(req.request_id)
            self.tier.warm(extend_block_hashes(req, max_blocks, B)[start:max_blocks])
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

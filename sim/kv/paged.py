"""Paged KV allocation (PagedAttention): fixed-size blocks, allocated on demand.

Policy over :class:`BlockPool`. A request holds ``ceil(tokens / block_size)`` blocks; the
only waste is the unfilled tail of its last block. With ``prefix_caching`` (vLLM v1's
automatic prefix caching), every full block gets a chained hash once its tokens are known;
a new request reuses the longest run of cached blocks at the start of its prompt, sharing
them by reference count. Freed blocks keep their hash in the LRU free queue until reused.
"""

from __future__ import annotations

from sim.kv.block_pool import BlockPool
from sim.kv.hashing import extend_block_hashes
from sim.request import Request


class PagedAllocator:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.pool = BlockPool(num_blocks)
        self.block_size = block_size
        self.num_total_slots = num_blocks * block_size
        self.prefix_caching = prefix_caching
        self.block_tables: dict[int, list[int]] = {}
        self.num_queried_tokens = 0  # prompt tokens looked up at admissions
        self.num_hit_tokens = 0  # of which served by the cache
        self._num_registered: dict[int, int] = {}  # request_id -> blocks hashed so far

    # -- prefix cache ---------------------------------------------------------------------

    def lookup_prefix(self, req: Request) -> int:
        if not self.prefix_caching:
            return 0
        B = self.block_size
        max_blocks = (req.num_tokens - 1) // B  # leave >= 1 token to compute
        hashes = extend_block_hashes(req, max_blocks, B)
        n = 0
        for h in hashes[:max_blocks]:
            if self.pool.get_cached(h) is None:
                break
            n += 1
        return n * B

    # -- allocation -----------------------------------------------------------------------

    def allocate_slots(self, req: Request, num_new_tokens: int, num_cached_tokens: int = 0) -> bool:
        B, pool = self.block_size, self.pool
        table = self.block_tables.get(req.request_id)
        total = req.num_computed_tokens + num_cached_tokens + num_new_tokens
        if table is not None and total <= len(table) * B:  # the hot path: a decode in room
            if self.prefix_caching:
                self._cache_full_blocks(req, table, total)
            return True
        fresh = table is None and req.num_computed_tokens == 0  # an admission: count hits
        if table is None:
            table = []
        if fresh:
            self.num_queried_tokens += req.num_tokens
            self.num_hit_tokens += num_cached_tokens
        cached_blocks: list[int] = []
        if num_cached_tokens:
            assert not table and num_cached_tokens % B == 0, "cache hits only on admission"
            cached_blocks = [pool.get_cached(h) for h in req.block_hashes[: num_cached_tokens // B]]
        need = -(-total // B) - len(table) - len(cached_blocks)
        if need > 0 or cached_blocks:
            # Cached blocks sitting in the free queue stop being free once touched.
            revived = sum(1 for b in cached_blocks if pool.ref_cnt[b] == 0)
            if need > pool.num_free - revived:
                if fresh:
                    self.num_queried_tokens -= req.num_tokens  # nothing was admitted
                    self.num_hit_tokens -= num_cached_tokens
                return False
            for b in cached_blocks:
                pool.touch(b)
            table.extend(cached_blocks)
            for _ in range(need):
                table.append(pool.pop_free())
            self.block_tables[req.request_id] = table
        elif req.request_id not in self.block_tables:
            self.block_tables[req.request_id] = table
        if self.prefix_caching:
            self._cache_full_blocks(req, table, total)
        return True

    def _cache_full_blocks(self, req: Request, table: list[int], num_tokens: int) -> None:
        """Hash the blocks that will be full once this step has computed ``num_tokens``."""
        n_full = min(num_tokens, req.num_tokens) // self.block_size
        done = self._num_registered.get(req.request_id, 0)
        if n_full <= done:
            return
        hashes = extend_block_hashes(req, n_full, self.block_size)
        for i in range(done, n_full):
            self.pool.cache(table[i], hashes[i])
        self._num_registered[req.request_id] = n_full

    def free(self, req: Request) -> None:
        table = self.block_tables.pop(req.request_id, None)
        self._num_registered.pop(req.request_id, None)
        if table:
            self.pool.release(table[::-1])  # tail first: evicted before the shared prefix

    # -- accounting -----------------------------------------------------------------------

    def held_slots(self, req: Request) -> int:
        return len(self.block_tables.get(req.request_id, ())) * self.block_size

    def num_allocated_slots(self) -> int:
        return (self.pool.num_blocks - self.pool.num_free) * self.block_size

    def num_external_fragmentation_slots(self) -> int:
        return 0

    def num_cached_free_slots(self) -> int:
        return self.pool.num_cached_free * self.block_size

    def fits_alone(self, num_tokens: int, req: Request) -> bool:
        return -(-num_tokens // self.block_size) <= self.pool.num_blocks

    def check_invariants(self) -> None:
        self.pool.check_invariants()
        refs = [0] * self.pool.num_blocks
        for table in self.block_tables.values():
            for b in table:
                refs[b] += 1
        assert refs == self.pool.ref_cnt, "block tables and ref counts disagree"

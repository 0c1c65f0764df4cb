"""Paged KV allocation (PagedAttention): fixed-size blocks, allocated on demand.

Policy over :class:`BlockPool`. A request holds ``ceil(tokens / block_size)`` blocks; the
only waste is the unfilled tail of its last block. With ``prefix_caching`` (vLLM v1's
automatic prefix caching), every full block gets a chained hash once its tokens are known;
a new request reuses the longest run of cached blocks at the start of its prompt, sharing
them by reference count. Freed blocks keep their hash in the free queue until reused
(evicted in LRU, LFU or FIFO order: ``eviction.py``).

Under LRU and LFU a request's *own* blocks (those holding a token from ``Request.own_from``
on: its new user tokens and answer) are hashed when it is freed, not as they fill: until
then no other request holds those tokens, so no lookup could find them, and neither queue
depends on when a block got its hash (LFU orders by hits, none possible meanwhile, then by
when it was freed); the results are the same. FIFO, which orders blocks by when they were
cached, hashes them as they fill. A finished request that no later turn repeats
(``followed`` False) marks them cached (``ANON``) without hashing them: no lookup ever
could. Preempted, the request is hashed in full and claims no own tokens after (its
hashes are in the cache now). With a token budget
(``token_budget.py``) a request holds only the blocks of the tokens it keeps, and gives
back its oldest droppable blocks as it grows.
"""

from __future__ import annotations

from sim.kv.base import PrefixCacheStats
from sim.kv.block_pool import make_block_pool
from sim.kv.eviction import PrefixEviction
from sim.kv.hashing import extend_block_hashes
from sim.kv.token_budget import TokenBudget, TokenEviction
from sim.request import Request


_NO_OWN_BLOCK = 1 << 62  # past any block index


class PagedAllocator:
    block_based = True
    #: Hash a request's own blocks at ``free`` (LRU and LFU). False: every block as it fills,
    #: the reference the tests hold the deferred hashing to.
    defer_own_blocks = True

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False,
                 eviction: PrefixEviction = PrefixEviction.LRU,
                 budget: TokenBudget = TokenBudget(), unhashed_first: bool = False) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if prefix_caching and budget.policy != TokenEviction.NONE:
            raise ValueError("prefix caching cannot be combined with token-level KV eviction")
        # vLLM 0.33's pool (``unhashed_first``) also caches blocks whose content another holds.
        self.pool = make_block_pool(num_blocks, eviction, caching=prefix_caching, unhashed_first=unhashed_first,
                                    duplicates=unhashed_first)
        self.block_size = block_size
        self.num_total_slots = num_blocks * block_size
        self.prefix_caching = prefix_caching
        self.budget = budget
        self._bounded = budget.policy != TokenEviction.NONE
        self.block_tables: dict[int, list[int]] = {}  # live blocks only, oldest first
        self.num_queried_tokens = 0  # prompt tokens looked up at admissions
        self.num_hit_tokens = 0  # of which served by the cache
        self.num_dropped_blocks = 0  # blocks given back by token-level eviction
        self._num_registered: dict[int, int] = {}  # request_id -> blocks hashed so far
        # Own blocks hashed at ``free`` (LRU and LFU; FIFO orders blocks by when they were
        # cached); then a request's blocks from ``own_from // B`` on wait until then.
        self._defer = (prefix_caching and eviction in (PrefixEviction.LRU, PrefixEviction.LFU)
                       and self.defer_own_blocks)

    # -- prefix cache ---------------------------------------------------------------------

    def lookup_prefix(self, req: Request) -> int:
        if not self.prefix_caching:
            return 0
        B = self.block_size
        max_blocks = (req.num_tokens - 1) // B  # leave >= 1 token to compute
        if self._defer:
            own = self._own_block(req)  # nobody has cached it (or any after it)
            if own < max_blocks:
                max_blocks = own
        hashes = extend_block_hashes(req, max_blocks, B)
        return self.pool.num_cached_prefix(hashes[:max_blocks]) * B

    # -- allocation -----------------------------------------------------------------------

    def allocate_slots(self, req: Request, num_new_tokens: int, num_cached_tokens: int = 0,
                       keep_free_slots: int = 0, full_tokens: int = 0) -> bool:
        """Blocks for ``num_new_tokens`` more tokens of ``req`` (after ``num_cached_tokens``
        prefix-cache hits, on admission), leaving ``keep_free_slots`` free; False (nothing
        changed) if they do not fit. ``full_tokens``: on admission, fail unless blocks for that
        many tokens (the whole sequence, less the hits) would fit as well (vLLM's
        ``scheduler_reserve_full_isl``: a check, not a reservation)."""
        B, pool = self.block_size, self.pool
        table = self.block_tables.get(req.request_id)
        total = req.num_computed_tokens + num_cached_tokens + num_new_tokens
        if not self._bounded:
            target = -(-total // B)
            if table is not None and target <= len(table):  # the hot path: a decode in room
                if self.prefix_caching:
                    self._cache_full_blocks(req, table, total)
                    self._set_room(req, table)
                return True
        else:
            target = self.budget.num_blocks(total, B)
        fresh = table is None and req.num_computed_tokens == 0  # an admission
        if table is None:
            table = []
        cached_blocks: list[int] = []
        if num_cached_tokens:
            assert not table and num_cached_tokens % B == 0, "cache hits only on admission"
            cached_blocks = list(map(pool.get_cached, req.block_hashes[: num_cached_tokens // B]))
        need = target - len(table) - len(cached_blocks)
        # Cached blocks sitting in the free queue stop being free once touched.
        revived = list(map(pool.ref_cnt.__getitem__, cached_blocks)).count(0) if cached_blocks else 0
        free = pool.num_free - revived - -(-keep_free_slots // B)
        if need > free:
            return False
        if full_tokens and -(-full_tokens // B) - len(table) - len(cached_blocks) > free:
            return False
        if fresh:
            self.num_queried_tokens += req.num_tokens
            self.num_hit_tokens += num_cached_tokens
        if cached_blocks:
            pool.touch_many(cached_blocks)
        table.extend(cached_blocks)
        if need > 0:
            table.extend(pool.pop_free_many(need))
        if need < 0:
            self._drop_blocks(table, -need)
        self.block_tables[req.request_id] = table
        if self.prefix_caching:
            self._cache_full_blocks(req, table, total)
        if not self._bounded:
            self._set_room(req, table)
        return True

    def fits_fresh(self, num_tokens: int, keep_free_slots: int = 0) -> bool:
        """Whether ``allocate_slots`` would find blocks for the first ``num_tokens`` tokens of a
        request that holds none, with no cache hits and no token budget (its free-block test)."""
        B = self.block_size
        return -(-num_tokens // B) <= self.pool.num_free - -(-keep_free_slots // B)

    def decode_slot(self, req: Request) -> None:
        """``allocate_slots(req, 1)`` for a decode (``num_computed_tokens = num_tokens - 1``)
        that does not fit its ``slot_room``, with no token budget and the free block it may
        need there (the caller checked): the same blocks, hashes and room, without the
        general path's admission cases (macro-steps call it at every block crossing)."""
        B, table = self.block_size, self.block_tables[req.request_id]
        total = req.num_computed_tokens + 1
        if total > len(table) * B:
            table += self.pool.pop_free_many(-(-total // B) - len(table))
        if self.prefix_caching:
            self._cache_full_blocks(req, table, total)
        self._set_room(req, table)

    def decode_hashes(self, req: Request) -> bool:
        """Whether ``req``'s decodes may hash blocks before it is freed (False: each block
        crossing only takes a block; ``slot_room`` is then its table's slots)."""
        return self.prefix_caching and self._num_registered.get(req.request_id, 0) < self._own_block(req)

    def _own_block(self, req: Request) -> int:
        """The first of ``req``'s own blocks, hashed at ``free``; a bound past every block
        when it has none (or nothing is deferred)."""
        own = req.own_from
        return own // self.block_size if self._defer and own is not None else _NO_OWN_BLOCK

    def _set_room(self, req: Request, table: list[int]) -> None:
        """Record on ``req`` the most tokens ``allocate_slots`` can grant it without a change
        (``Request.slot_room``): its table's slots, and with prefix caching one token short
        of filling the next unhashed block (``_cache_full_blocks`` would hash it). Depends
        only on the table and the hashed count, which change only here and in ``free``.
        Never set under a token budget (its block count is not ``ceil(total / B)``)."""
        B = self.block_size
        room = len(table) * B
        if self.prefix_caching:
            done = self._num_registered.get(req.request_id, 0)
            if not self._defer or done < self._own_block(req):  # the next block is hashed when full
                hashed_end = (done + 1) * B - 1
                room = room if room < hashed_end else hashed_end
        req.slot_room = room

    def _drop_blocks(self, table: list[int], count: int) -> None:
        """Give back the ``count`` oldest droppable blocks (token-level eviction)."""
        first = self.budget.first_droppable_block(self.block_size)
        dropped = table[first:first + count]
        del table[first:first + count]
        self.pool.release(dropped[::-1])
        self.num_dropped_blocks += count

    def kept_tokens(self, num_tokens: int) -> int:
        """Tokens of a ``num_tokens``-token sequence whose KV is kept."""
        return self.budget.kept_tokens(num_tokens)

    def _cache_full_blocks(self, req: Request, table: list[int], num_tokens: int) -> None:
        """Hash the blocks that will be full once this step has computed ``num_tokens``."""
        n_full = min(num_tokens, req.num_tokens) // self.block_size
        if self._defer:
            own = self._own_block(req)
            if own < n_full:
                n_full = own  # own blocks: hashed at ``free``
        done = self._num_registered.get(req.request_id, 0)
        if n_full <= done:
            return
        self._hash_blocks(req, table, done, n_full)
        self._num_registered[req.request_id] = n_full

    def _hash_blocks(self, req: Request, table: list[int], start: int, stop: int) -> None:
        """Cache ``table[start:stop]`` under ``req``'s block hashes (``start < stop``)."""
        hashes = extend_block_hashes(req, stop, self.block_size)
        self.pool.cache_many(table[start:stop], hashes[start:stop])

    def free(self, req: Request, hashed_tokens: int | None = None) -> None:
        """Give back ``req``'s blocks. ``hashed_tokens``: only the full blocks of its first that
        many tokens keep (or get) a hash; a block past them that only ``req`` holds loses its
        hash (vLLM's async scheduling: a preempted request's last decode was in flight, its
        block never hashed). None: every computed block."""
        table = self.block_tables.pop(req.request_id, None)
        done = self._num_registered.pop(req.request_id, 0)
        req.slot_room = 0
        if table:
            if self._defer and req.own_from is not None:
                # Its own blocks (from own_from's on) were taken fresh and found by no lookup
                # (none had a hash): it holds their only reference.
                n = len(table)
                sole = n - req.own_from // self.block_size
                lo, hi = self._cache_own_blocks(req, table, done, hashed_tokens)
                # tail first; its blocks lo to hi (own blocks: among the sole) marked ANON in the same pass
                self.pool.release(table[::-1], sole if sole > 0 else 0, (n - hi, n - lo))
                return
            if hashed_tokens is not None and self.prefix_caching:
                pool = self.pool
                for block in table[hashed_tokens // self.block_size:done]:
                    if pool.ref_cnt[block] == 1:
                        pool.drop_hash(block)
            self.pool.release(table[::-1])  # tail first: evicted before the shared prefix

    def _cache_own_blocks(self, req: Request, table: list[int], done: int,
                          hashed_tokens: int | None = None) -> tuple[int, int]:
        """At ``free``: the hashes its own blocks would have got as they filled (every full,
        computed block: ``num_computed_tokens`` is the last step's total, or ``hashed_tokens``),
        in block order. Nothing else can have cached them (the tokens were its own). A
        finished request no later turn repeats marks them ``ANON`` instead: cached, never found
        (the blocks returned, ``table[lo:hi]``, for ``free`` to mark as it releases them)."""
        computed = req.num_computed_tokens if hashed_tokens is None else hashed_tokens
        n_full = min(computed, req.num_tokens) // self.block_size
        hashed = n_full  # blocks hashed for real; the rest (own blocks only) are ANON
        if not req.followed and req.num_generated >= req.num_output_tokens:
            hashed = max(done, min(n_full, self._own_block(req)))
        if hashed > done:
            self._hash_blocks(req, table, done, hashed)
        req.own_from = None  # hashed now: if it comes back, its blocks may be in the cache
        return (hashed, n_full) if n_full > hashed else (0, 0)  # ``cache_anon``'s blocks: ``free`` marks them

    # -- accounting -----------------------------------------------------------------------

    def block_ids(self, req: Request) -> list[int]:
        """A copy of ``req``'s block table (physical block ids, oldest first)."""
        return list(self.block_tables.get(req.request_id, ()))

    def held_slots(self, req: Request) -> int:
        return len(self.block_tables.get(req.request_id, ())) * self.block_size

    def growth_slots(self, req: Request, num_tokens: int | None = None) -> int:
        B, blocks = self.block_size, self.budget.num_blocks  # ceil(tokens / B) without a token budget
        full = blocks(req.num_prompt_tokens + req.max_tokens, B)
        held = len(self.block_tables.get(req.request_id, ())) if num_tokens is None else blocks(num_tokens, B)
        return (full - held) * B if full > held else 0

    def num_allocated_slots(self) -> int:
        return (self.pool.num_blocks - self.pool.num_free) * self.block_size

    def num_external_fragmentation_slots(self) -> int:
        return 0

    def num_cached_free_slots(self) -> int:
        return self.pool.num_cached_free * self.block_size

    def prefix_cache_stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(enabled=self.prefix_caching, queried_tokens=self.num_queried_tokens,
                                hit_tokens=self.num_hit_tokens, evictions=self.pool.num_evictions)

    def fits_alone(self, num_tokens: int, req: Request) -> bool:
        return self.budget.num_blocks(num_tokens, self.block_size) <= self.pool.num_blocks

    def check_invariants(self) -> None:
        self.pool.check_invariants()
        refs = [0] * self.pool.num_blocks
        for table in self.block_tables.values():
            for b in table:
                refs[b] += 1
        assert refs == self.pool.ref_cnt, "block tables and ref counts disagree"

"""The block pool: mechanism only (ids, reference counts, the free queue, the hash map).

Policy (which blocks a request gets, what counts as a cache hit) lives in ``paged.py``.
Contract, as in vLLM v1's ``BlockPool``:

* Every block is either *in use* (``ref_cnt > 0``) or in the *free queue* (``ref_cnt ==
  0``), never both: ``num_free + num_in_use == num_blocks`` at all times.
* The free queue is ordered by eviction priority: its front is reused first. The order
  is a policy (``eviction.py``; vLLM's LRU by default: a freed block goes to the back, so
  the least recently freed is evicted first). Callers free a request's blocks tail first,
  so the tail blocks go before the prefix that others are likelier to share.
* A free block may still carry a hash and be found by ``get_cached``; ``touch`` takes it
  out of the free queue again. Reusing a block for new content (``pop_free``) drops its
  hash: that is an eviction.

The LRU queue is an ``OrderedDict`` (O(1) removal from the middle on a cache hit, O(1)
pop from the front), standing in for vLLM's doubly linked list.
"""

from __future__ import annotations

from sim.kv.eviction import PrefixEviction, make_free_queue
from sim.kv.plain_pool import PlainBlockPool

#: The hash of a block cached for no one: it counts as cached (an eviction when reused) but
#: no lookup can find it (``hash`` never returns -1). sim/kv/paged.py's own blocks of a
#: finished request that no later turn repeats.
ANON = -1


class BlockPool:
    caching = True  # blocks get hashes (a pool without: :class:`PlainBlockPool`)

    def __init__(self, num_blocks: int, eviction: PrefixEviction = PrefixEviction.LRU,
                 unhashed_first: bool = False, duplicates: bool = False) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self._free = make_free_queue(eviction, num_blocks, unhashed_first=unhashed_first)
        self._push_hashed = self._free.push_hashed
        self._pop_blank = getattr(self._free, "pop_blank", None)  # a queue whose front holds only blank blocks
        self._cached_apart = self._free.cached_apart  # the queue must hear of each newly cached block
        self._cached: dict[int, int] = {}  # hash -> block id (the first cached of those that hold it)
        #: ``duplicates`` (vLLM): a block whose content another block already holds is cached
        #: too, under the same hash, as vLLM's BlockHashToBlockMap keeps it; a lookup finds the
        #: earliest cached. hash -> the later blocks, in the order they were cached.
        self.duplicates = duplicates
        self._more: dict[int, dict[int, None]] = {}
        self.num_cached_free = 0  # free blocks that still carry a hash
        # ``pop_free_many`` may do ``_evict``'s work itself (a subclass that extends it may not).
        self._plain_evict = type(self)._evict is BlockPool._evict
        self._plain_touch = type(self).touch is BlockPool.touch and not getattr(self._free, "hears_hits", True)
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        return len(self._free)

    def pop_free(self) -> int:
        """Take the front of the free queue for new content (evicting its cached hash)."""
        return self.pop_free_many(1)[0]

    def pop_free_many(self, count: int) -> list[int]:
        """Take ``count`` blocks off the front of the free queue, in order, for new content
        (each still carrying a hash is evicted: one call for a request's new blocks)."""
        # Popping all first is the same: the queue's order does not depend on the hashes.
        pop_blank = self._pop_blank
        if pop_blank is not None:
            blocks = pop_blank(count)
            if blocks is not None:  # blank blocks only (vLLM 0.33's queue front): nothing to evict
                ref_cnt = self.ref_cnt
                for block in blocks:
                    ref_cnt[block] = 1
                return blocks
            # the front's blocks[:blank] carry no hash, the back list's rest one each
            blocks, blank = self._free.pop_split(count)
            block_hash, ref_cnt = self.block_hash, self.ref_cnt
            if self._free._findable:  # some in the back list are in the map: count off those popped
                self._free._findable -= sum([1 for b in blocks[blank:] if block_hash[b] != ANON])
            elif self._plain_evict:  # every popped hash is ANON: evictions without reading one
                evicted = count - blank
                self.num_cached_free -= evicted
                self.num_evictions += evicted
                for block in blocks[:blank]:
                    ref_cnt[block] = 1
                for block in blocks[blank:]:
                    block_hash[block] = None
                    ref_cnt[block] = 1
                return blocks
        else:
            blocks = self._free.pop_many(count)
            block_hash, ref_cnt = self.block_hash, self.ref_cnt
        if count == 1:  # a decode's new block
            block = blocks[0]
            h = block_hash[block]
            if h is not None:
                self._evict(blocks, [h], 1)
            ref_cnt[block] = 1
            return blocks
        hashes = list(map(block_hash.__getitem__, blocks))
        evicted = count - hashes.count(None)
        if not evicted:
            for block in blocks:
                ref_cnt[block] = 1
            return blocks
        if not self._plain_evict:  # a pool that hears of each eviction (sim/kv/offload.py)
            self._evict(blocks, hashes, evicted)
            for block in blocks:
                ref_cnt[block] = 1
            return blocks
        # ``_evict`` and the reference counts in one pass over the blocks
        self.num_cached_free -= evicted
        self.num_evictions += evicted
        if evicted > hashes.count(ANON):  # some were in the map
            for block, h in zip(blocks, hashes):
                if h is not None and h != ANON:
                    self._unmap(block, h)
        for block in blocks:
            block_hash[block] = None
            ref_cnt[block] = 1
        return blocks

    def _evict(self, blocks: list[int], hashes: list, evicted: int) -> None:
        """The popped ``blocks`` drop the ``hashes`` they carried (None: none; ``evicted`` of
        them carry one). Each found in the map under that block leaves it (it may point at
        another block by now; an ``ANON`` hash is in no map)."""
        self.num_cached_free -= evicted
        self.num_evictions += evicted
        block_hash = self.block_hash
        if evicted > hashes.count(ANON):  # some were in the map
            for block, h in zip(blocks, hashes):
                if h is not None and h != ANON:
                    self._unmap(block, h)
        for block in blocks:
            block_hash[block] = None

    def get_cached(self, h: int) -> int | None:
        return self._cached.get(h)

    def num_cached_prefix(self, hashes: list[int]) -> int:
        """How many of ``hashes``, from the first, ``get_cached`` finds (a prefix lookup)."""
        cached = self._cached
        n = 0
        for h in hashes:
            if h not in cached:
                break
            n += 1
        return n

    def _unmap(self, block: int, h: int) -> None:
        """``block`` leaves the hash map under ``h`` (if it is there: the map may point at
        another block by now); the next cached duplicate, if any, is found from now on."""
        cached, more = self._cached, self._more
        if cached.get(h) == block:
            del cached[h]
            later = more.get(h)
            if later:
                nxt = next(iter(later))
                cached[h] = nxt
                del later[nxt]
                if not later:
                    del more[h]
        elif more:
            later = more.get(h)
            if later and block in later:
                del later[block]
                if not later:
                    del more[h]

    def drop_hash(self, block: int) -> None:
        """A block in use forgets its hash (no eviction: its content was never findable in
        the engine modelled; ``PagedAllocator.free``'s ``hashed_tokens``)."""
        h = self.block_hash[block]
        if h is not None and self.ref_cnt[block] > 0:
            if h != ANON:
                self._unmap(block, h)
            self.block_hash[block] = None

    def touch(self, block: int) -> None:
        """Share a cached block with one more request (reviving it if it was free)."""
        if self.ref_cnt[block] == 0:
            self._free.remove(block)
            self.num_cached_free -= 1
        self.ref_cnt[block] += 1
        self._free.on_hit(block)

    def cache(self, block: int, h: int) -> None:
        """Register a full, computed block under its chained hash (first writer wins)."""
        if self.block_hash[block] is None:
            if h not in self._cached:
                self._cached[h] = block
            elif self.duplicates:
                self._more.setdefault(h, {})[block] = None
            else:
                return
            self.block_hash[block] = h
            if self._cached_apart:
                self._free.on_cached(block)

    def cache_many(self, blocks, hashes) -> None:
        """``cache(block, h)`` for each block and its hash, in order (one call for a request's
        newly full blocks)."""
        block_hash, cached, duplicates, apart = self.block_hash, self._cached, self.duplicates, self._cached_apart
        for block, h in zip(blocks, hashes):
            if block_hash[block] is None:
                if h not in cached:
                    cached[h] = block
                elif duplicates:
                    self._more.setdefault(h, {})[block] = None
                else:
                    continue
                block_hash[block] = h
                if apart:
                    self._free.on_cached(block)

    def cache_anon(self, blocks: list[int]) -> None:
        """``cache`` each of ``blocks`` (all without a hash) under hashes no lookup asks for."""
        block_hash = self.block_hash
        for block in blocks:
            block_hash[block] = ANON
        if self._cached_apart:  # a queue that keeps cached blocks apart (FIFO, LFU)
            for block in blocks:
                self._free.on_cached(block)

    def touch_many(self, blocks: list[int]) -> None:
        """``touch`` each of ``blocks``, in order (a request's cache hits at admission)."""
        if not self._plain_touch:  # a queue that orders by hits, or a pool that extends ``touch``
            for block in blocks:
                self.touch(block)
            return
        ref_cnt, remove = self.ref_cnt, self._free.remove
        for block in blocks:
            r = ref_cnt[block]
            if not r:
                remove(block)
                self.num_cached_free -= 1
            ref_cnt[block] = r + 1

    def release(self, blocks: list[int], sole: int = 0, anon: tuple[int, int] = (0, 0)) -> None:
        """Drop one reference from each block, in the order given (pass tail first).
        ``sole``: the first that many hold their last one (a request's own blocks:
        sim/kv/paged.py's ``free``), so they are freed without looking. ``anon``: the
        positions ``(a, b)`` (``b <= sole``) of blocks without a hash to ``cache_anon`` first,
        done in the same pass."""
        ref_cnt, block_hash = self.ref_cnt, self.block_hash
        a, b = anon
        if a < b and (b > sole or self._cached_apart):
            self.cache_anon(blocks[a:b])
            a = b = 0
        if sole:
            freed = blocks[:sole]
            if a < b:  # cache_anon(blocks[a:b]) in the same pass
                head, marked = freed[:a], freed[a:b]
                for block in head:
                    ref_cnt[block] = 0
                for block in marked:
                    ref_cnt[block] = 0
                    block_hash[block] = ANON
                for block in freed[b:]:
                    ref_cnt[block] = 0
                hashes = list(map(block_hash.__getitem__, head)) + [ANON] * (b - a)  # (then the rest's)
            else:
                for block in freed:
                    ref_cnt[block] = 0
                hashes = []
            if sole < len(blocks):
                rest = blocks[sole:]
                for block in rest:
                    ref_cnt[block] -= 1
                freed += [block for block in rest if not ref_cnt[block]]  # in the same order
            hashes += map(block_hash.__getitem__, freed[len(hashes):])
        else:
            for block in blocks:
                ref_cnt[block] -= 1
            freed = [block for block in blocks if not ref_cnt[block]]  # in the same order
            hashes = list(map(block_hash.__getitem__, freed))
        self.num_cached_free += len(freed) - hashes.count(None)
        self._push_hashed(freed, hashes)

    def free_order(self) -> list[int]:
        """The free queue, front (next evicted) first. For tests and reports."""
        return list(self._free)

    def check_invariants(self) -> None:
        in_use = sum(1 for r in self.ref_cnt if r > 0)
        assert all(r >= 0 for r in self.ref_cnt), "negative ref_cnt"
        assert in_use + len(self._free) == self.num_blocks, "a block is lost or double-counted"
        assert all(self.ref_cnt[b] == 0 for b in self._free), "a referenced block is in the free queue"
        cached_free = sum(1 for b in self._free if self.block_hash[b] is not None)
        assert cached_free == self.num_cached_free, "cached-free counter drifted"
        for h, b in self._cached.items():
            assert self.block_hash[b] == h, "hash map and block hashes disagree"
        if self._pop_blank is not None:  # vLLM 0.33's queue: blank blocks at the front, hashed ones behind
            q = self._free
            assert all(self.block_hash[b] is None for b in q._front), "a hashed block in the blank front"
            back = list(q)[len(q._front):]
            assert all(self.block_hash[b] is not None for b in back), "a blank block in the hashed back list"
            assert q._findable == sum(1 for b in back if self.block_hash[b] != ANON), "findable count drifted"
        for h, later in self._more.items():
            assert later and h in self._cached, "a duplicate without a first block"
            assert all(self.block_hash[b] == h for b in later), "duplicates and block hashes disagree"


def make_block_pool(num_blocks: int, eviction: PrefixEviction = PrefixEviction.LRU,
                    caching: bool = True, unhashed_first: bool = False,
                    duplicates: bool = False) -> BlockPool | PlainBlockPool:
    """The pool a paged allocator uses: a :class:`PlainBlockPool` without caching (the order of
    free blocks then decides nothing). ``unhashed_first``: freed blocks without a hash are
    reused first (``eviction.UnhashedFirstLRUQueue``, LRU only); ``duplicates``: blocks of the
    same content are all cached (:class:`BlockPool`)."""
    return BlockPool(num_blocks, eviction, unhashed_first, duplicates) if caching else PlainBlockPool(num_blocks)

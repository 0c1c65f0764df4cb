"""Prefix-cache eviction: the order in which free blocks are reused.

A free block may still hold a cached prefix (it has a hash): reusing it for new content
evicts that prefix. The free queue's order is the eviction policy; the block pool
(``block_pool.py``) is the mechanism and calls these hooks:

* ``push(block, cached)`` when a block's last reference is dropped (the caller frees a
  request's blocks tail first), ``remove(block)`` when a cache hit revives it, ``pop()``
  to take the next block to reuse; ``push_many`` and ``pop_many`` do several in order
  (``push_hashed(blocks, hashes)``: ``push`` with ``cached`` = the block has a hash);
* ``on_cached(block)`` when a block gets a hash (only where ``cached_apart``: a queue that
  keeps cached blocks apart), ``on_hit(block)`` on every cache hit.

Policies:

* ``lru`` (vLLM v1): one queue in the order blocks were freed; the least recently freed is
  reused first, cached or not. Freeing tail first puts a request's tail blocks nearer the
  front, so they go before the prefix others are likelier to share.
* ``fifo``: blocks holding nothing reusable go first; then cached blocks in the order
  they entered the cache, however often they were hit since.
* ``lfu``: blocks holding nothing reusable go first; then the cached block with the fewest
  hits, ties broken least recently freed first.

FIFO's and LFU's queues live in ``eviction_keyed.py``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Iterator

from sim.kv.eviction_keyed import FIFOQueue, LFUQueue


class PrefixEviction(StrEnum):
    LRU = "lru"
    LFU = "lfu"
    FIFO = "fifo"


class _ListQueue:
    """Blocks in a list and the index of its front: taking blocks off the front is one slice,
    freeing them one ``extend``; the popped front is dropped from the list now and then."""

    hears_hits = True  # ``on_hit`` must be called on every cache hit

    compact_after = 4096  # popped entries dropped from the list's front past this many

    def __init__(self, blocks: range) -> None:
        self._q: list[int] = list(blocks)
        self._head = 0

    def _advance(self, head: int) -> None:
        if head > self.compact_after and 2 * head > len(self._q):  # drop the popped front now and then
            del self._q[:head]
            head = 0
        self._head = head

    def pop(self) -> int:
        return self.pop_many(1)[0]

    def pop_many(self, count: int) -> list[int]:  # pragma: no cover - each queue's own
        raise NotImplementedError

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        """``push(block, cached)`` for each entry, in order."""
        self._q.extend([block for block, _ in entries])

    def push_plain(self, blocks: list[int]) -> None:
        """``push(block, _)`` for each block, in order (the order ignores the hashes)."""
        self._q.extend(blocks)

    def push_hashed(self, blocks: list[int], hashes: list) -> None:
        """``push(block, hash is not None)`` for each block and its hash, in order."""
        self._q.extend(blocks)


class LRUQueue(_ListQueue):
    cached_apart = False  # ``on_cached`` does nothing: the order ignores which blocks are cached
    hears_hits = False  # ``on_hit`` does nothing (the pool may skip it)

    """Blocks in the order they were freed, the least recently freed first (a
    :class:`_ListQueue`). A cache hit on a free block (``remove``) leaves its entry in place,
    counted stale in ``_stale``; a block's stale entries always precede its live one (it is
    pushed again only after it was removed), so popping skips the first ones it meets."""

    def __init__(self, blocks: range) -> None:
        super().__init__(blocks)
        self._stale: dict[int, int] = {}  # block -> its stale entries in the list
        self._num_stale = 0

    def __len__(self) -> int:
        return len(self._q) - self._head - self._num_stale

    def __contains__(self, block: int) -> bool:
        return block in self._live()

    def __iter__(self) -> Iterator[int]:
        return iter(self._live())

    def _live(self) -> list[int]:
        live = self._q[self._head:]
        if self._num_stale:
            skip = dict(self._stale)
            kept = []
            for block in live:
                if skip.get(block):
                    skip[block] -= 1
                else:
                    kept.append(block)
            live = kept
        return live

    def push(self, block: int, cached: bool) -> None:
        self._q.append(block)

    def remove(self, block: int) -> None:
        self._stale[block] = self._stale.get(block, 0) + 1
        self._num_stale += 1

    def pop_many(self, count: int) -> list[int]:
        """``count`` pops, in order."""
        if not self._num_stale:  # (every decode's new block)
            q = self._q
            head = self._head
            end = head + count
            if end > len(q):
                raise KeyError("pop from an empty free queue")
            blocks = q[head:end]
            if end > self.compact_after and 2 * end > len(q):
                del q[:end]
                end = 0
            self._head = end
            return blocks
        if count > len(self):
            raise KeyError("pop from an empty free queue")
        q, head, stale = self._q, self._head, self._stale
        blocks = []
        while len(blocks) < count:
            block = q[head]
            head += 1
            n = stale.get(block)
            if n:  # an entry left behind by a cache hit
                if n == 1:
                    del stale[block]
                else:
                    stale[block] = n - 1
                self._num_stale -= 1
            else:
                blocks.append(block)
        self._advance(head)
        return blocks

    def on_cached(self, block: int) -> None:
        pass

    def on_hit(self, block: int) -> None:
        pass


class UnhashedFirstLRUQueue(LRUQueue):
    """vLLM 0.33's free queue: freed blocks that hold no hash go to the *front* (a stack:
    the request's last block is reused first, before any older free block), freed blocks
    with a hash to the back in the order given, as :class:`LRUQueue`. So cached prefixes
    outlive the blank blocks freed after them. Every block starts in the front (the order the
    back list would give), so the back list holds hashed blocks only: the pool counts a pop's
    evictions without reading hashes while none of them is findable (``_findable``). (Upstream vLLM before 0.33 appended every
    freed block to the back: plain LRU.)"""

    push_plain = None  # the order depends on the hashes: the pool calls push_many

    def __init__(self, blocks: range) -> None:
        super().__init__(range(0))
        # unhashed free blocks, the next one to reuse last: all blocks at the start (blank), in
        # the order the back list held them before (the same pops). So every live entry of the
        # back list carries a hash, and ``_findable`` of them carry one other than ANON (-1).
        self._front: list[int] = list(reversed(blocks))
        self._findable = 0

    def __len__(self) -> int:
        return len(self._front) + len(self._q) - self._head - self._num_stale

    def _live(self) -> list[int]:
        return self._front[::-1] + super()._live()

    def push(self, block: int, cached: bool) -> None:
        self.push_many([(block, cached)])

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        """The entries' blank blocks go to the front in the order given (the first given is
        reused first); their cached blocks to the back, in the order given."""
        self.push_hashed([block for block, _ in entries], [True if cached else None for _, cached in entries])

    def remove(self, block: int) -> None:
        LRUQueue.remove(self, block)  # a cache hit: a findable block, in the back list
        self._findable -= 1

    def pop_split(self, count: int) -> tuple[list[int], int]:
        """``pop_many(count)`` and how many of the blocks, from the first, came from the front
        (no hash); the rest came from the back list (each with a hash; the caller counts the
        findable ones off ``_findable``)."""
        take = len(self._front)
        return self.pop_many(count), (take if take < count else count)

    def push_hashed(self, blocks: list[int], hashes: list) -> None:
        """``push(block, hash is not None)`` for each block and its hash, in order."""
        blank = hashes.count(None)
        self._findable += len(blocks) - blank - hashes.count(-1)  # (ANON)
        if not blank:
            self._q.extend(blocks)
        elif blank == len(blocks):
            self._front.extend(reversed(blocks))
        elif None not in hashes[blank:]:
            # the usual release: a request's blank tail block(s) first, then its hashed blocks
            self._front.extend(reversed(blocks[:blank]))
            self._q.extend(blocks[blank:])
        else:
            self._front.extend(reversed([b for b, h in zip(blocks, hashes) if h is None]))
            self._q.extend([b for b, h in zip(blocks, hashes) if h is not None])

    def pop_blank(self, count: int) -> list[int] | None:
        """``pop_many(count)`` when the front alone serves it (None, nothing taken, when it
        does not): those blocks were freed without a hash and got none since (a block gets
        a hash only while in use), so the pool need not look for hashes to evict."""
        front = self._front
        if count > len(front):
            return None
        blocks = front[:-count - 1:-1]
        del front[-count:]
        return blocks

    def pop_many(self, count: int) -> list[int]:
        front = self._front
        if not front:
            return LRUQueue.pop_many(self, count)
        if count <= len(front):  # all from the front (a stack): the last pushed first
            blocks = front[:-count - 1:-1]
            del front[-count:]
            return blocks
        if count > len(self):
            raise KeyError("pop from an empty free queue")
        take = len(front)
        blocks = front[:-take - 1:-1]
        del front[-take:]
        if take < count:
            blocks += super().pop_many(count - take)
        return blocks


_QUEUES = {PrefixEviction.LRU: LRUQueue, PrefixEviction.FIFO: FIFOQueue, PrefixEviction.LFU: LFUQueue}


class PlainQueue(_ListQueue):
    """The free queue when no block is ever cached (prefix caching off): every policy is
    then the order blocks were freed (LRU's), and no block leaves the queue but at its
    front (a :class:`_ListQueue`: ``pop_many`` is one slice)."""

    def __len__(self) -> int:
        return len(self._q) - self._head

    def __contains__(self, block: int) -> bool:
        return block in self._q[self._head:]

    def __iter__(self) -> Iterator[int]:
        return iter(self._q[self._head:])

    def push(self, block: int, cached: bool) -> None:
        assert not cached, "a cached block in a queue for uncached blocks"
        self._q.append(block)

    def remove(self, block: int) -> None:
        raise AssertionError("no block is revived when nothing is cached")

    def pop_many(self, count: int) -> list[int]:
        """``count`` pops, in order."""
        q = self._q
        head = self._head
        end = head + count
        if end > len(q):
            raise KeyError("pop from an empty free queue")
        blocks = q[head:end]  # (every decode's new block)
        if end > self.compact_after and 2 * end > len(q):
            del q[:end]
            end = 0
        self._head = end
        return blocks

    def on_cached(self, block: int) -> None:
        raise AssertionError("no block is cached in this queue")

    def on_hit(self, block: int) -> None:
        raise AssertionError("no block is hit in this queue")


def make_free_queue(policy: PrefixEviction, num_blocks: int, caching: bool = True,
                    unhashed_first: bool = False):
    """All ``num_blocks`` blocks start free, uncached, in id order. ``caching``: blocks may
    get hashes (prefix caching); without, every policy is :class:`PlainQueue`.
    ``unhashed_first``: LRU's queue is :class:`UnhashedFirstLRUQueue` (vLLM 0.33)."""
    if not caching:
        return PlainQueue(range(num_blocks))
    if unhashed_first and PrefixEviction(policy) == PrefixEviction.LRU:
        return UnhashedFirstLRUQueue(range(num_blocks))
    return _QUEUES[PrefixEviction(policy)](range(num_blocks))

"""Prefix-cache eviction: the order in which free blocks are reused.

A free block may still hold a cached prefix (it has a hash): reusing it for new content
evicts that prefix. The free queue's order is the eviction policy; the block pool
(``block_pool.py``) is the mechanism and calls these hooks:

* ``push(block, cached)`` when a block's last reference is dropped (the caller frees a
  request's blocks tail first), ``remove(block)`` when a cache hit revives it, ``pop()``
  to take the next block to reuse; ``push_many`` and ``pop_many`` do several in order;
* ``on_cached(block)`` when a block gets a hash, ``on_hit(block)`` on every cache hit.

Policies:

* ``lru`` (vLLM v1): one queue in the order blocks were freed; the least recently freed is
  reused first, cached or not. Freeing tail first puts a request's tail blocks nearer the
  front, so they go before the prefix others are likelier to share.
* ``fifo``: blocks holding nothing reusable go first; then cached blocks in the order
  they entered the cache, however often they were hit since.
* ``lfu``: blocks holding nothing reusable go first; then the cached block with the fewest
  hits, ties broken least recently freed first.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from enum import StrEnum
from typing import Iterator


class PrefixEviction(StrEnum):
    LRU = "lru"
    LFU = "lfu"
    FIFO = "fifo"


class LRUQueue:
    """Blocks in the order they were freed, the least recently freed first: a list and the
    index of its front, so that taking a request's blocks is one slice and freeing them one
    ``extend``. A cache hit on a free block (``remove``) leaves its entry in place, counted
    stale in ``_stale``; a block's stale entries always precede its live one (it is pushed
    again only after it was removed), so popping skips the first ones it meets."""

    compact_after = 4096  # popped entries dropped from the list's front past this many

    def __init__(self, blocks: range) -> None:
        self._q: list[int] = list(blocks)
        self._head = 0
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

    def pop(self) -> int:
        return self.pop_many(1)[0]

    def pop_many(self, count: int) -> list[int]:
        """``count`` pops, in order."""
        if count > len(self):
            raise KeyError("pop from an empty free queue")
        q, head = self._q, self._head
        if not self._num_stale:
            blocks = q[head:head + count]
            head += count
        else:
            stale = self._stale
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
        if head > self.compact_after and 2 * head > len(q):  # drop the popped front now and then
            del q[:head]
            head = 0
        self._head = head
        return blocks

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        """``push(block, cached)`` for each entry, in order."""
        self._q.extend([block for block, _ in entries])

    def push_plain(self, blocks: list[int]) -> None:
        """``push(block, _)`` for each block, in order (LRU's order ignores the hashes)."""
        self._q.extend(blocks)

    def on_cached(self, block: int) -> None:
        pass

    def on_hit(self, block: int) -> None:
        pass


class FIFOQueue:
    """Uncached free blocks first (in freeing order), then cached ones in the order they
    entered the cache (``on_cached``), however often they were hit since; a cached block that
    never was (none here) by when it was freed.

    Cached blocks wait in a heap of their keys (ints from one clock, so a key names one
    block: ``_owner``), with lazy deletion: ``_live[block]`` is the key that counts, and a
    popped key that is not is skipped. The same order as a heap of (key, block) tuples,
    with int comparisons."""

    def __init__(self, blocks: range) -> None:
        self._plain: OrderedDict[int, None] = OrderedDict.fromkeys(blocks)
        self._heap: list[int] = []
        self._live: dict[int, int] = {}  # free cached block -> its key
        self._owner: dict[int, int] = {}  # key -> block
        self._clock = 0  # counts pushes and hashes: "freed when", "cached when"
        self._cached_seq: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._plain) + len(self._live)

    def __contains__(self, block: int) -> bool:
        return block in self._plain or block in self._live

    def __iter__(self) -> Iterator[int]:
        yield from self._plain
        yield from (block for _, block in sorted((key, block) for block, key in self._live.items()))

    def push(self, block: int, cached: bool) -> None:
        self._clock += 1
        if not cached:
            self._plain[block] = None
            return
        key = self._cached_seq.get(block, self._clock)
        self._live[block] = key
        self._owner[key] = block
        heapq.heappush(self._heap, key)

    def remove(self, block: int) -> None:
        if block in self._plain:
            del self._plain[block]
        else:
            del self._live[block]  # its key in the heap goes stale

    def pop(self) -> int:
        if self._plain:
            return self._plain.popitem(last=False)[0]
        heap, live, owner = self._heap, self._live, self._owner
        while True:
            key = heapq.heappop(heap)
            block = owner.get(key)
            if block is not None and live.get(block) == key:
                del live[block]
                del owner[key]
                self._cached_seq.pop(block, None)  # its content is about to be replaced
                return block

    def pop_many(self, count: int) -> list[int]:
        return [self.pop() for _ in range(count)]

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        for block, cached in entries:
            self.push(block, cached)

    def on_cached(self, block: int) -> None:
        self._clock += 1
        self._cached_seq[block] = self._clock

    def on_hit(self, block: int) -> None:
        pass


class LFUQueue:
    """Uncached free blocks first (in freeing order), then cached ones by (hits, when freed).

    A block's hits do not change while it is free (a hit takes it out of the queue), and
    blocks are freed in clock order, so the cached blocks of one hit count are a FIFO: one
    deque per hit count, popped from the lowest. A revived block's entry is left behind and
    skipped (``_live`` holds each free cached block's entry). The same order as a heap keyed
    by (hits, freed), without a comparison per push and pop."""

    def __init__(self, blocks: range) -> None:
        self._plain: OrderedDict[int, None] = OrderedDict.fromkeys(blocks)
        self._levels: dict[int, deque] = {}  # hits -> deque of (freed, block), oldest first
        self._live: dict[int, tuple[int, int]] = {}  # free cached block -> (hits, freed)
        self._clock = 0  # counts pushes: "freed when"
        self._hits: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._plain) + len(self._live)

    def __contains__(self, block: int) -> bool:
        return block in self._plain or block in self._live

    def __iter__(self) -> Iterator[int]:
        yield from self._plain
        yield from (block for _, block in sorted((key, block) for block, key in self._live.items()))

    def push(self, block: int, cached: bool) -> None:
        self._clock += 1
        if not cached:
            self._plain[block] = None
            return
        hits = self._hits.get(block, 0)
        level = self._levels.get(hits)
        if level is None:
            level = self._levels[hits] = deque()
        level.append((self._clock, block))
        self._live[block] = (hits, self._clock)

    def remove(self, block: int) -> None:
        if block in self._plain:
            del self._plain[block]
        else:
            del self._live[block]  # its entry in its level goes stale

    def pop(self) -> int:
        if self._plain:
            return self._plain.popitem(last=False)[0]
        levels, live = self._levels, self._live
        while True:
            hits = min(levels)
            level = levels[hits]
            freed, block = level.popleft()
            if not level:
                del levels[hits]
            if live.get(block) == (hits, freed):
                del live[block]
                self._hits.pop(block, None)  # its content is about to be replaced
                return block

    def pop_many(self, count: int) -> list[int]:
        return [self.pop() for _ in range(count)]

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        for block, cached in entries:
            self.push(block, cached)

    def on_cached(self, block: int) -> None:
        self._hits[block] = 0

    def on_hit(self, block: int) -> None:
        self._hits[block] = self._hits.get(block, 0) + 1


_QUEUES = {PrefixEviction.LRU: LRUQueue, PrefixEviction.FIFO: FIFOQueue, PrefixEviction.LFU: LFUQueue}


class PlainQueue:
    """The free queue when no block is ever cached (prefix caching off): every policy is
    then the order blocks were freed (LRU's), and no block leaves the queue but at its
    front. A list and the index of its front: ``pop_many`` is one slice."""

    def __init__(self, blocks: range) -> None:
        self._q: list[int] = list(blocks)
        self._head = 0

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

    def pop(self) -> int:
        return self.pop_many(1)[0]

    def pop_many(self, count: int) -> list[int]:
        """``count`` pops, in order."""
        head = self._head
        if count > len(self._q) - head:
            raise KeyError("pop from an empty free queue")
        blocks = self._q[head:head + count]
        head += count
        if head > 4096 and 2 * head > len(self._q):  # drop the popped front now and then
            del self._q[:head]
            head = 0
        self._head = head
        return blocks

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        self._q.extend([block for block, _ in entries])

    def push_plain(self, blocks: list[int]) -> None:
        """``push(block, False)`` for each block, in order."""
        self._q.extend(blocks)

    def on_cached(self, block: int) -> None:
        raise AssertionError("no block is cached in this queue")

    def on_hit(self, block: int) -> None:
        raise AssertionError("no block is hit in this queue")


def make_free_queue(policy: PrefixEviction, num_blocks: int, caching: bool = True):
    """All ``num_blocks`` blocks start free, uncached, in id order. ``caching``: blocks may
    get hashes (prefix caching); without, every policy is :class:`PlainQueue`."""
    if not caching:
        return PlainQueue(range(num_blocks))
    return _QUEUES[PrefixEviction(policy)](range(num_blocks))

"""The free queues of the FIFO and LFU eviction policies (sim/kv/eviction.py): uncached free
blocks first, in the order they were freed, then cached ones by the policy's key.

* FIFO: by when a block entered the cache, however often it was hit since: a heap of int
  keys.
* LFU: by hits, ties broken by when the block was freed: one FIFO per hit count.

Both keep exactly the order of the heaps of (key, block) tuples they replaced
(tests/sim/kv/heap_queues.py, tests/sim/kv/test_keyed_queues.py).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from typing import Iterator


class _CachedApart:
    """What both queues share: ``_plain`` (uncached free blocks, in freeing order) and
    ``_live`` (each free cached block's key; entries elsewhere that are not it are stale)."""

    _plain: OrderedDict
    _live: dict
    cached_apart = True  # ``on_cached`` moves a block out of ``_plain``

    def __len__(self) -> int:
        return len(self._plain) + len(self._live)

    def __contains__(self, block: int) -> bool:
        return block in self._plain or block in self._live

    def __iter__(self) -> Iterator[int]:
        yield from self._plain
        yield from (block for _, block in sorted((key, block) for block, key in self._live.items()))

    def remove(self, block: int) -> None:
        if block in self._plain:
            del self._plain[block]
        else:
            del self._live[block]  # its entry goes stale: skipped when reached

    def pop_many(self, count: int) -> list[int]:
        return [self.pop() for _ in range(count)]

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        for block, cached in entries:
            self.push(block, cached)

    def push_hashed(self, blocks: list[int], hashes: list) -> None:
        """``push(block, hash is not None)`` for each block and its hash, in order."""
        for block, h in zip(blocks, hashes):
            self.push(block, h is not None)

    def pop(self) -> int:  # pragma: no cover - each queue's own
        raise NotImplementedError

    def push(self, block: int, cached: bool) -> None:  # pragma: no cover - each queue's own
        raise NotImplementedError


class FIFOQueue(_CachedApart):
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

    def push(self, block: int, cached: bool) -> None:
        self._clock += 1
        if not cached:
            self._plain[block] = None
            return
        key = self._cached_seq.get(block, self._clock)
        self._live[block] = key
        self._owner[key] = block
        heapq.heappush(self._heap, key)

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

    def on_cached(self, block: int) -> None:
        self._clock += 1
        self._cached_seq[block] = self._clock

    def on_hit(self, block: int) -> None:
        pass


class LFUQueue(_CachedApart):
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

    def on_cached(self, block: int) -> None:
        self._hits[block] = 0

    def on_hit(self, block: int) -> None:
        self._hits[block] = self._hits.get(block, 0) + 1

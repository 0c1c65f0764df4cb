"""The heap-based free queues the FIFO and LFU queues replaced (sim/kv/eviction.py), kept as the
references the tests hold them to: cached blocks in a heap of (key, block) tuples with lazy
deletion, uncached ones first in freeing order."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Iterator


class KeyedQueue:
    """Uncached free blocks first (in freeing order), then cached ones by ``_key``.

    Cached entries live in a heap with lazy deletion: ``_live[block]`` is the entry that
    counts; stale heap entries are skipped when popped.
    """

    def __init__(self, blocks: range) -> None:
        self._plain: OrderedDict[int, None] = OrderedDict.fromkeys(blocks)
        self._heap: list[tuple] = []
        self._live: dict[int, tuple] = {}
        self._clock = 0  # counts pushes: "freed when"
        self._cached_seq: dict[int, int] = {}
        self._hits: dict[int, int] = {}

    def _key(self, block: int, freed: int) -> tuple:  # pragma: no cover - abstract
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._plain) + len(self._live)

    def __contains__(self, block: int) -> bool:
        return block in self._plain or block in self._live

    def __iter__(self) -> Iterator[int]:
        yield from self._plain
        yield from (entry[-1] for entry in sorted(self._live.values()))

    def push(self, block: int, cached: bool) -> None:
        self._clock += 1
        if not cached:
            self._plain[block] = None
            return
        entry = (*self._key(block, self._clock), block)
        self._live[block] = entry
        heapq.heappush(self._heap, entry)

    def remove(self, block: int) -> None:
        if block in self._plain:
            del self._plain[block]
        else:
            del self._live[block]  # its heap entry goes stale

    def pop(self) -> int:
        if self._plain:
            return self._plain.popitem(last=False)[0]
        while True:
            entry = heapq.heappop(self._heap)
            block = entry[-1]
            if self._live.get(block) == entry:
                del self._live[block]
                self._cached_seq.pop(block, None)  # its content is about to be replaced
                self._hits.pop(block, None)
                return block

    def pop_many(self, count: int) -> list[int]:
        return [self.pop() for _ in range(count)]

    def push_many(self, entries: list[tuple[int, bool]]) -> None:
        for block, cached in entries:
            self.push(block, cached)

    def on_cached(self, block: int) -> None:
        self._clock += 1
        self._cached_seq[block] = self._clock
        self._hits[block] = 0

    def on_hit(self, block: int) -> None:
        self._hits[block] = self._hits.get(block, 0) + 1




class HeapFIFO(KeyedQueue):
    def _key(self, block: int, freed: int) -> tuple:
        return (self._cached_seq.get(block, freed),)


class HeapLFU(KeyedQueue):
    def _key(self, block: int, freed: int) -> tuple:
        return (self._hits.get(block, 0), freed)

"""The block pool when no block is ever cached (prefix caching off): ``block_pool.py``'s
``make_block_pool`` builds it."""

from __future__ import annotations

from sim.kv.eviction import PlainQueue


class PlainBlockPool:
    """The pool when no block is ever cached (prefix caching off). No block is then shared,
    so a block is in use exactly when it is out of the free queue (a :class:`PlainQueue`):
    the pool keeps no per-block state, and taking or freeing blocks is one list operation.
    ``ref_cnt`` is derived on demand (for checks and tests)."""

    caching = False
    num_cached_free = 0
    num_evictions = 0

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self._free = PlainQueue(range(num_blocks))
        # Taking and freeing blocks are the queue's own operations (no per-block state here).
        self.pop_free_many = self._free.pop_many
        self.release = self._free.push_plain

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def ref_cnt(self) -> list[int]:
        refs = [1] * self.num_blocks
        for block in self._free:
            refs[block] = 0
        return refs

    def pop_free(self) -> int:
        return self._free.pop()

    def get_cached(self, h: int) -> None:
        return None

    def touch(self, block: int) -> None:
        raise AssertionError("no block is shared when nothing is cached")

    def cache(self, block: int, h: int) -> None:
        raise AssertionError("a pool built without caching got a hash")

    def free_order(self) -> list[int]:
        return list(self._free)

    def check_invariants(self) -> None:
        free = list(self._free)
        assert len(set(free)) == len(free), "a block is freed twice"
        assert all(0 <= b < self.num_blocks for b in free), "an unknown block id is free"

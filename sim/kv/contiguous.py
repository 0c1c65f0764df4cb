"""Contiguous KV allocation: the pre-PagedAttention baselines.

Each admitted request reserves one contiguous extent of the pool, sized up front:

* ``static``: ``max_kv_tokens`` (``max_model_len``) for everyone, as a server that
  pre-allocates a full-length cache per slot does. Lowering ``max_tokens`` does not help.
* ``exact``: the request's prompt plus its ``max_tokens``: less waste, but extents of
  different sizes come and go, and the free space splits into holes (external
  fragmentation). Placement is first-fit by address.

The reservation is held until the request finishes or is preempted; it never grows.
With a token budget (``token_budget.py``) the extent is a ring buffer of at most the
budget's tokens. Requests hold no blocks (``block_based`` is False), and there is no
prefix cache.
"""

from __future__ import annotations

import bisect
from types import MappingProxyType

from sim.kv.base import PrefixCacheStats
from sim.kv.token_budget import TokenBudget
from sim.request import Request


class ContiguousAllocator:
    block_size = 1
    block_based = False
    block_tables = MappingProxyType({})  # no request holds blocks

    def __init__(self, num_slots: int, max_kv_tokens: int, exact: bool,
                 budget: TokenBudget = TokenBudget()) -> None:
        if num_slots <= 0:
            raise ValueError(f"num_slots must be positive, got {num_slots}")
        self.num_total_slots = num_slots
        self.budget = budget
        self.max_kv_tokens = budget.kept_tokens(max_kv_tokens)
        self.exact = exact
        self._starts: list[int] = []  # sorted extent starts
        self._extents: dict[int, tuple[int, int]] = {}  # request_id -> (start, size)
        self._size_at: dict[int, int] = {}  # start -> size
        self._allocated = 0

    def reservation(self, req: Request) -> int:
        if self.exact:
            return self.budget.kept_tokens(min(req.num_prompt_tokens + req.max_tokens, self.max_kv_tokens))
        return self.max_kv_tokens

    def kept_tokens(self, num_tokens: int) -> int:
        """Tokens of a ``num_tokens``-token sequence whose KV is kept."""
        return self.budget.kept_tokens(num_tokens)

    def lookup_prefix(self, req: Request) -> int:
        return 0

    def _first_fit(self, size: int) -> int | None:
        cursor = 0
        for start in self._starts:
            if start - cursor >= size:
                return cursor
            cursor = start + self._size_at[start]
        return cursor if self.num_total_slots - cursor >= size else None

    def allocate_slots(self, req: Request, num_new_tokens: int, num_cached_tokens: int = 0,
                       keep_free_slots: int = 0, full_tokens: int = 0) -> bool:
        # (``full_tokens`` needs no check: the extent reserved at admission holds the whole sequence)
        extent = self._extents.get(req.request_id)
        needed = self.budget.kept_tokens(req.num_computed_tokens + num_cached_tokens + num_new_tokens)
        if extent is not None:
            assert needed <= extent[1], "a contiguous reservation never grows"
            return True
        size = self.reservation(req)
        assert needed <= size, "reservation smaller than the request's tokens"
        if self.num_total_slots - self._allocated - size < keep_free_slots:
            return False
        start = self._first_fit(size)
        if start is None:
            return False
        bisect.insort(self._starts, start)
        self._size_at[start] = size
        self._extents[req.request_id] = (start, size)
        self._allocated += size
        return True

    def free(self, req: Request, hashed_tokens: int | None = None) -> None:
        extent = self._extents.pop(req.request_id, None)
        if extent is None:
            return
        start, size = extent
        self._starts.pop(bisect.bisect_left(self._starts, start))
        del self._size_at[start]
        self._allocated -= size

    def block_ids(self, req: Request) -> list[int]:
        return []

    def held_slots(self, req: Request) -> int:
        extent = self._extents.get(req.request_id)
        return extent[1] if extent else 0

    def growth_slots(self, req: Request, num_tokens: int | None = None) -> int:
        return 0  # the whole reservation is taken at admission

    def num_allocated_slots(self) -> int:
        return self._allocated

    def _holes(self) -> list[int]:
        holes, cursor = [], 0
        for start in self._starts:
            holes.append(start - cursor)
            cursor = start + self._size_at[start]
        holes.append(self.num_total_slots - cursor)
        return holes

    def num_external_fragmentation_slots(self) -> int:
        holes = self._holes()
        return sum(holes) - max(holes)

    def num_cached_free_slots(self) -> int:
        return 0

    def prefix_cache_stats(self) -> PrefixCacheStats:
        return PrefixCacheStats(enabled=False, queried_tokens=0, hit_tokens=0, evictions=0)

    def fits_alone(self, num_tokens: int, req: Request) -> bool:
        return self.reservation(req) <= self.num_total_slots

    def check_invariants(self) -> None:
        cursor = 0
        for start in self._starts:
            assert start >= cursor, "extents overlap"
            cursor = start + self._size_at[start]
        assert cursor <= self.num_total_slots, "an extent runs past the pool"
        assert self._allocated == sum(self._size_at.values()), "allocated counter drifted"
        assert len(self._extents) == len(self._starts), "extent maps disagree"

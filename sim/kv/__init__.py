"""KV allocators behind one Protocol (``base.KVAllocator``), chosen by ``AllocatorKind``:
contiguous and paged pools, prefix caching and its eviction, token budgets, swap space.

May import: ``sim.request``, ``sim.errors``. Knows nothing of time, cost or scheduling.
"""

from __future__ import annotations

from enum import StrEnum

from sim.kv.base import KVAllocator, PrefixCacheStats
from sim.kv.contiguous import ContiguousAllocator
from sim.kv.eviction import PrefixEviction
from sim.kv.paged import PagedAllocator
from sim.kv.token_budget import TokenBudget

__all__ = ["AllocatorKind", "ContiguousAllocator", "KVAllocator", "PagedAllocator",
           "PrefixCacheStats", "make_allocator"]


class AllocatorKind(StrEnum):
    CONTIGUOUS_STATIC = "contiguous-static"
    CONTIGUOUS_EXACT = "contiguous-exact"
    PAGED = "paged"


def make_allocator(kind: AllocatorKind, *, num_blocks: int, block_size: int,
                   max_kv_tokens: int, prefix_caching: bool = False,
                   eviction: PrefixEviction = PrefixEviction.LRU,
                   budget: TokenBudget = TokenBudget(), unhashed_first: bool = False) -> KVAllocator:
    """The one place an ``AllocatorKind`` becomes an object. The pool has
    ``num_blocks * block_size`` token slots for every kind, so kinds compare fairly.
    ``unhashed_first``: a paged pool reuses freed blocks without a hash first (vLLM 0.33)."""
    if kind == AllocatorKind.PAGED:
        return PagedAllocator(num_blocks, block_size, prefix_caching, eviction, budget, unhashed_first)
    exact = kind == AllocatorKind.CONTIGUOUS_EXACT
    return ContiguousAllocator(num_blocks * block_size, max_kv_tokens, exact=exact, budget=budget)

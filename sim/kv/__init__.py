"""KV allocators behind one Protocol (``base.KVAllocator``), chosen by ``AllocatorKind``."""

from __future__ import annotations

from sim.kv.contiguous import ContiguousAllocator
from sim.kv.paged import PagedAllocator
from sim.scenario import AllocatorKind


def make_allocator(kind: AllocatorKind, *, num_blocks: int, block_size: int,
                   max_kv_tokens: int, prefix_caching: bool = False):
    """The one place an ``AllocatorKind`` becomes an object. The pool has
    ``num_blocks * block_size`` token slots for every kind, so kinds compare fairly."""
    if kind == AllocatorKind.PAGED:
        return PagedAllocator(num_blocks, block_size, prefix_caching)
    exact = kind == AllocatorKind.CONTIGUOUS_EXACT
    return ContiguousAllocator(num_blocks * block_size, max_kv_tokens, exact=exact)

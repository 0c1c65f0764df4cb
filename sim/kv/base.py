"""The one interface every KV allocator implements, and how to pick one.

The scheduler only *asks*: ``lookup_prefix`` (how much of this prompt is cached?),
``allocate_slots`` (make room for these tokens, or say no), ``free``. Allocators know
nothing of time or SimPy, so the validation engine reuses them around real kernels.

Slots are token positions of the KV pool. ``held_slots(req)`` is what a request holds
(a whole reservation for the contiguous allocators, whole blocks for the paged one).

Block-based allocators (``block_based``) give each request a table of physical block ids,
which swaps copy and the real engine's kernels read. A contiguous allocator holds no
blocks: its ``block_tables`` is always empty and ``block_ids`` always ``[]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from sim.kv.token_budget import TokenBudget
from sim.request import Request


@dataclass(frozen=True)
class PrefixCacheStats:
    """Prefix-cache counters of a run so far (hits and evictions are 0 without caching)."""

    enabled: bool  # the allocator caches prefixes
    queried_tokens: int  # prompt tokens looked up at admissions
    hit_tokens: int  # of which served by the cache (prefill tokens saved)
    evictions: int  # cached blocks reused for new content

    @property
    def hit_rate(self) -> float | None:
        """``hit_tokens / queried_tokens``; None without caching or before any lookup."""
        if not self.enabled or not self.queried_tokens:
            return None
        return self.hit_tokens / self.queried_tokens


class KVAllocator(Protocol):
    num_total_slots: int  # the KV pool, in tokens
    block_size: int  # allocation granule in tokens (1 for contiguous)
    budget: TokenBudget  # the token-level eviction budget (unbounded by default)
    block_based: bool  # requests hold physical blocks (paged), not one extent (contiguous)
    block_tables: Mapping[int, list[int]]  # request_id -> block ids, oldest first; live view

    def lookup_prefix(self, req: Request) -> int:
        """Tokens at the start of ``req`` whose KV is already cached (0 if no caching).

        Always a whole number of blocks and below ``req.num_tokens``: at least one token is
        computed, so the step can sample. Claims nothing.
        """

    def allocate_slots(self, req: Request, num_new_tokens: int, num_cached_tokens: int = 0,
                       keep_free_slots: int = 0, full_tokens: int = 0) -> bool:
        """Make ``req`` hold slots for ``num_computed_tokens + num_cached_tokens +
        num_new_tokens`` tokens (those it keeps, under a token budget). ``num_cached_tokens
        > 0`` only on admission, with the value ``lookup_prefix`` just gave: those blocks
        are shared, not copied. Returns False, changing nothing, when the pool cannot
        supply the room while leaving ``keep_free_slots`` free (the admission watermark),
        or (``full_tokens > 0``, on admission) could not supply room for that many tokens
        (vLLM's full-sequence admission check; a contiguous pool reserves its extent anyway)."""

    def kept_tokens(self, num_tokens: int) -> int:
        """How many of a sequence's ``num_tokens`` computed tokens keep their KV."""

    def free(self, req: Request, hashed_tokens: int | None = None) -> None:
        """Return everything ``req`` holds (a no-op if it holds nothing). ``hashed_tokens``:
        with prefix caching, only the blocks of that many first tokens stay cached (None: all)."""

    def block_ids(self, req: Request) -> list[int]:
        """A copy of ``req``'s block table (``[]`` if it holds none, and always for a
        contiguous allocator)."""

    def held_slots(self, req: Request) -> int:
        """Slots ``req`` holds now (shared prefix blocks included)."""

    def growth_slots(self, req: Request, num_tokens: int | None = None) -> int:
        """Slots ``req`` may still take before it finishes: those of its prompt plus
        ``max_tokens`` less those it holds (or would hold with ``num_tokens`` tokens). 0 for
        a contiguous allocator, which reserves the whole extent at admission."""

    def num_allocated_slots(self) -> int:
        """Slots held by at least one request (each physical slot once)."""

    def num_external_fragmentation_slots(self) -> int:
        """Free slots that cannot serve an allocation because they lie in holes
        smaller than the largest free extent (0 for block-based pools)."""

    def num_cached_free_slots(self) -> int:
        """Free slots that still hold reusable prefix-cache blocks."""

    def prefix_cache_stats(self) -> PrefixCacheStats:
        """The prefix-cache counters so far."""

    def fits_alone(self, num_tokens: int, req: Request) -> bool:
        """Could ``req`` hold ``num_tokens`` tokens with the pool otherwise empty?"""

    def check_invariants(self) -> None:
        """Raise AssertionError if a slot or block is lost or double-counted."""

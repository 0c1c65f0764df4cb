"""The one interface every KV allocator implements, and how to pick one.

The scheduler only *asks*: ``lookup_prefix`` (how much of this prompt is cached?),
``allocate_slots`` (make room for these tokens, or say no), ``free``. Allocators know
nothing of time or SimPy, so the validation engine reuses them around real kernels.

Slots are token positions of the KV pool. ``held_slots(req)`` is what a request holds
(a whole reservation for the contiguous allocators, whole blocks for the paged one).
"""

from __future__ import annotations

from typing import Protocol

from sim.request import Request


class KVAllocator(Protocol):
    num_total_slots: int  # the KV pool, in tokens
    block_size: int  # allocation granule in tokens (1 for contiguous)

    def lookup_prefix(self, req: Request) -> int:
        """Tokens at the start of ``req`` whose KV is already cached (0 if no caching).

        Always a whole number of blocks and below ``req.num_tokens``: at least one token is
        computed, so the step can sample. Claims nothing.
        """

    def allocate_slots(self, req: Request, num_new_tokens: int, num_cached_tokens: int = 0,
                       keep_free_slots: int = 0) -> bool:
        """Make ``req`` hold slots for ``num_computed_tokens + num_cached_tokens +
        num_new_tokens`` tokens (those it keeps, under a token budget). ``num_cached_tokens
        > 0`` only on admission, with the value ``lookup_prefix`` just gave: those blocks
        are shared, not copied. Returns False, changing nothing, when the pool cannot
        supply the room while leaving ``keep_free_slots`` free (the admission watermark)."""

    def kept_tokens(self, num_tokens: int) -> int:
        """How many of a sequence's ``num_tokens`` computed tokens keep their KV."""

    def free(self, req: Request) -> None:
        """Return everything ``req`` holds (a no-op if it holds nothing)."""

    def held_slots(self, req: Request) -> int:
        """Slots ``req`` holds now (shared prefix blocks included)."""

    def num_allocated_slots(self) -> int:
        """Slots held by at least one request (each physical slot once)."""

    def num_external_fragmentation_slots(self) -> int:
        """Free slots that cannot serve an allocation because they lie in holes
        smaller than the largest free extent (0 for block-based pools)."""

    def num_cached_free_slots(self) -> int:
        """Free slots that still hold reusable prefix-cache blocks."""

    def fits_alone(self, num_tokens: int, req: Request) -> bool:
        """Could ``req`` hold ``num_tokens`` tokens with the pool otherwise empty?"""

    def check_invariants(self) -> None:
        """Raise AssertionError if a slot or block is lost or double-counted."""

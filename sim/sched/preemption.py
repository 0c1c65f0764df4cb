"""Preemption: what happens to a running request evicted to make room.

* ``recompute``: free its KV, put it at the front of ``waiting``; when readmitted it
  prefills its prompt and the tokens it had generated again (vLLM's default).
* ``swap``: copy its KV to the CPU swap space over PCIe and free the GPU blocks; it
  waits in ``swapped`` and is copied back when room returns. Falls back to recompute
  when the swap space is full.

The *victim* is chosen by the batching policy (the lowest-priority request not yet
scheduled this step: the most recently admitted, as vLLM does).
"""

from __future__ import annotations

from collections import deque
from enum import StrEnum

from sim.kv.base import KVAllocator
from sim.kv.swap import SwapSpace, SwapTransfer
from sim.request import Request, RequestStatus
from sim.sched.output import SchedulerOutput


class PreemptionMode(StrEnum):
    RECOMPUTE = "recompute"
    SWAP = "swap"


class Preemptor:
    def __init__(self, mode: PreemptionMode, allocator: KVAllocator, swap: SwapSpace,
                 bytes_per_slot: float, copies_per_block: int = 1,
                 transfer: SwapTransfer = SwapTransfer.PER_BLOCK) -> None:
        self.mode = mode
        self.copies_per_block = copies_per_block  # engines copy each block per layer, K and V
        self.gathered = transfer == SwapTransfer.GATHERED  # then one copy per layer, K and V
        self._swapped_blocks: dict[int, int] = {}  # request_id -> blocks it swapped out
        self.allocator = allocator
        self.swap = swap
        self.bytes_per_slot = bytes_per_slot
        self.num_recompute = 0
        self.num_swap = 0
        self.num_recomputed_tokens = 0  # KV tokens thrown away by recompute preemption
        self.num_swap_fallbacks = 0  # swap wanted, swap space full: recomputed instead
        self.swap_out_bytes = 0
        self.swap_in_bytes = 0

    def held_bytes(self, req: Request) -> int:
        return int(self.allocator.held_slots(req) * self.bytes_per_slot)

    def preempt(self, req: Request, waiting: deque, swapped: deque, out: SchedulerOutput,
                hashed_tokens: int | None = None) -> None:
        """``hashed_tokens``: see ``PagedAllocator.free`` (None: every computed block stays cached)."""
        req.num_preemptions += 1
        out.preempted.append(req)
        if self.mode == PreemptionMode.SWAP:
            num_bytes = self.held_bytes(req)
            if self.swap.reserve(req.request_id, num_bytes):
                num_blocks = 1  # a contiguous extent moves in one copy per layer
                if self.allocator.block_based:
                    out.swapped_out_blocks[req.request_id] = self.allocator.block_ids(req)
                    num_blocks = len(out.swapped_out_blocks[req.request_id])
                self._swapped_blocks[req.request_id] = num_blocks
                self._count_copies(out, num_blocks, num_bytes)
                self.allocator.free(req)
                req.status = RequestStatus.SWAPPED
                req.num_swaps += 1
                self.num_swap += 1
                out.swapped_out.append(req)
                out.swap_out_bytes += num_bytes
                self.swap_out_bytes += num_bytes
                swapped.append(req)
                return
            self.num_swap_fallbacks += 1
        if hashed_tokens is None:
            self.allocator.free(req)
        else:
            self.allocator.free(req, hashed_tokens)
        self.num_recompute += 1
        self.num_recomputed_tokens += req.num_computed_tokens
        req.num_computed_tokens = 0
        req.status = RequestStatus.WAITING
        waiting.appendleft(req)

    def _count_copies(self, out: SchedulerOutput, num_blocks: int, num_bytes: int) -> None:
        """The host<->device copies (and device staging) one request's swap takes."""
        if self.gathered and self.allocator.block_based:  # a contiguous extent needs no packing
            out.swap_copies += self.copies_per_block
            out.swap_staged_bytes += num_bytes
            out.swap_staging_launches += self.copies_per_block
        else:
            out.swap_copies += num_blocks * self.copies_per_block

    def swap_in(self, req: Request, num_new_tokens: int, out: SchedulerOutput) -> bool:
        """Bring a swapped request back with room for ``num_new_tokens`` more tokens."""
        if not self.allocator.allocate_slots(req, num_new_tokens):
            return False
        num_bytes = self.swap.release(req.request_id)
        out.swap_in_bytes += num_bytes
        self._count_copies(out, self._swapped_blocks.pop(req.request_id), num_bytes)
        self.swap_in_bytes += num_bytes
        out.swapped_in.append(req)
        return True

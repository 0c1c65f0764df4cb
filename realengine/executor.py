"""The real step executor: one scheduler batch, run on the model, timed.

It reads the allocator's block tables (the same objects the simulator uses), packs the
batch (prefill chunks first, then decodes), moves swapped KV blocks between the GPU
cache and host memory, runs the forward and returns the measured seconds.

Token content: every position's token id is derived from the request's symbolic
segments (``sim.request``), so prompts that share a prefix share token ids, and the
prefix cache's reused blocks hold exactly the KV a recomputation would produce. The
sampled token is computed (greedy) but the next input is the workload's token: the same
work, with content that never depends on random weights.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from kernels.reference import gather_blocks_ref, scatter_blocks_ref
from sim.kv.base import KVAllocator
from sim.kv.swap import SwapTransfer
from sim.request import Request
from sim.sched.output import SchedulerOutput, is_decode
from realengine.model import StepInputs, TinyLlama, TritonBackend


def token_ids(req: Request, start: int, end: int, vocab_size: int) -> np.ndarray:
    """Token ids of positions [start, end) of ``req``'s known tokens (int64)."""
    pieces, pos = [], 0
    for seg_id, length in req.segments():
        lo, hi = max(start, pos), min(end, pos + length)
        if lo < hi:
            offsets = np.arange(lo - pos, hi - pos, dtype=np.int64)
            pieces.append((seg_id * 1_000_003 + offsets * 7_919) % vocab_size)
        pos += length
        if pos >= end:
            break
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)


class StepExecutor:
    """Runs scheduler batches on ``model``; swaps move KV between its cache and host memory
    as ``swap_transfer`` says (sim.kv.swap.SwapTransfer): block by block, per layer, K and
    V, or packed by the block-copy kernels (``kernels.block_copy``: Triton on CUDA, the
    torch references on the CPU) into one buffer per layer, K and V, moved in one copy."""

    def __init__(self, model: TinyLlama, allocator: KVAllocator, block_size: int,
                 swap_transfer: SwapTransfer | str = SwapTransfer.PER_BLOCK, tier_copies=None) -> None:
        if not allocator.block_based:
            raise ValueError("the real engine needs a block-table allocator (kv.allocator: paged)")
        self.model = model
        self.allocator = allocator
        self.block_size = block_size
        self.device = model.device
        self.gathered = SwapTransfer(swap_transfer) == SwapTransfer.GATHERED
        self.kernels = isinstance(model.backend, TritonBackend)  # block copies by the Triton kernels
        self._host: dict[int, list[torch.Tensor]] = {}  # swapped KV: K and V of every layer, on the host
        self.num_steps = 0
        self.num_host_copies = 0  # host<->device copies made by swaps
        self.tier_copies = tier_copies  # kv.offload's CPU tier (realengine/tier_copy.py): its copies, timed apart

    def _caches(self) -> list[torch.Tensor]:
        return [c for pair in zip(self.model.key_caches, self.model.value_caches) for c in pair]

    # -- swaps ---------------------------------------------------------------------------------

    def swap_out(self, req_id: int, block_ids: list[int]) -> None:
        """Copy a preempted request's blocks to host memory (before anyone reuses them)."""
        cuda = self.device.type == "cuda"
        buffers = []
        for cache in self._caches():
            host = torch.empty((len(block_ids), *cache.shape[1:]), dtype=cache.dtype, pin_memory=cuda)
            if self.gathered:
                idx = torch.tensor(block_ids, device=self.device, dtype=torch.int32)
                if self.kernels:
                    from kernels import swap_out_blocks  # noqa: PLC0415

                    swap_out_blocks(cache, idx, host)
                else:
                    host.copy_(gather_blocks_ref(cache, idx))
                self.num_host_copies += 1
            else:
                for i, b in enumerate(block_ids):
                    host[i].copy_(cache[b], non_blocking=cuda)
                self.num_host_copies += len(block_ids)
            buffers.append(host)
        self._host[req_id] = buffers

    def swap_in(self, req: Request) -> None:
        """Copy a swapped request's blocks back into the blocks it was given now."""
        buffers = self._host.pop(req.request_id)
        n = buffers[0].shape[0]
        block_ids = self.allocator.block_tables[req.request_id][:n]
        cuda = self.device.type == "cuda"
        for cache, host in zip(self._caches(), buffers):
            if self.gathered:
                idx = torch.tensor(block_ids, device=self.device, dtype=torch.int32)
                if self.kernels:
                    from kernels import swap_in_blocks  # noqa: PLC0415

                    swap_in_blocks(host, cache, idx)
                else:
                    scatter_blocks_ref(host.clone(), cache, idx)  # clone: the host-to-device copy
                self.num_host_copies += 1
            else:
                for i, b in enumerate(block_ids):
                    cache[b].copy_(host[i], non_blocking=cuda)
                self.num_host_copies += n

    def swaps(self, out: SchedulerOutput) -> None:
        """A batch's swap-outs, then its swap-ins."""
        for req in out.swapped_out:
            self.swap_out(req.request_id, out.swapped_out_blocks[req.request_id])
        for req in out.swapped_in:
            self.swap_in(req)

    # -- packing -------------------------------------------------------------------------------

    def pack(self, out: SchedulerOutput) -> StepInputs:
        return pack_batch(out, self.allocator.block_tables, self.block_size,
                          self.model.spec.vocab_size, self.device)

    # -- a step --------------------------------------------------------------------------------

    def execute(self, out: SchedulerOutput) -> float:
        """Run ``out`` for real; returns measured seconds (swaps, packing and forward)."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        if self.tier_copies is not None:  # off the step, as the simulator runs them on the host link
            self.tier_copies.step(out)
        sync()
        t0 = time.perf_counter()
        self.swaps(out)
        if out.scheduled:
            tokens = self.model.forward(self.pack(out))
            tokens.cpu()  # an engine reads the sampled tokens back: a synchronization
        sync()
        self.num_steps += 1
        return time.perf_counter() - t0


def attention_mismatches(model: TinyLlama, out: SchedulerOutput, kept: list[torch.Tensor], *,
                         rtol: float = 1e-4, atol: float = 1e-4) -> tuple[int, list[tuple[int, int]]]:
    """Check a step's attention outputs (``model.forward(..., keep_attention=True)``) against
    a dense recomputation of each scheduled sequence: (token rows checked, [(request_id,
    layer) that differ]). Rows are packed prefill chunks first, then decodes."""
    prefills = [(r, n) for r, n in out.scheduled if not is_decode(r, n)]
    decodes = [(r, n) for r, n in out.scheduled if is_decode(r, n)]
    row, bad = 0, []
    for r, n in prefills + decodes:
        c = r.num_computed_tokens
        dense = model.dense_attention(token_ids(r, 0, c + n, model.spec.vocab_size).tolist())
        for layer, got in enumerate(kept):
            if not torch.allclose(got[row:row + n], dense[layer][c:c + n], rtol=rtol, atol=atol):
                bad.append((r.request_id, layer))
        row += n
    return row, bad


def pack_batch(out: SchedulerOutput, block_tables: dict[int, list[int]], block_size: int,
               vocab_size: int, device: torch.device) -> StepInputs:
    """The host-side work of a step: a batch's token ids, positions, slots and attention
    metadata as device tensors (``microbench`` times exactly this as the ``step`` kernel)."""
    B = block_size
    prefills = [(r, n) for r, n in out.scheduled if not is_decode(r, n)]
    decodes = [r for r, n in out.scheduled if is_decode(r, n)]
    width = max(len(block_tables[r.request_id]) for r, _ in out.scheduled)
    ids, positions, slots, starts, ctx, sample = [], [], [], [0], [], []
    for r, n in prefills:
        c = r.num_computed_tokens
        pos = np.arange(c, c + n, dtype=np.int64)
        table = np.asarray(block_tables[r.request_id], dtype=np.int64)
        ids.append(token_ids(r, c, c + n, vocab_size))
        positions.append(pos)
        slots.append(table[pos // B] * B + pos % B)
        starts.append(starts[-1] + n)
        ctx.append(c)
        if c + n == r.num_tokens:
            sample.append(starts[-1] - 1)
    seq_lens = []
    for r in decodes:
        p, table = r.num_computed_tokens, block_tables[r.request_id]
        ids.append(token_ids(r, p, p + 1, vocab_size))
        positions.append(np.array([p], dtype=np.int64))
        slots.append(np.array([table[p // B] * B + p % B], dtype=np.int64))
        seq_lens.append(p + 1)
        sample.append(starts[-1] + len(seq_lens) - 1)
    ids, positions, slots = (np.concatenate(x) for x in (ids, positions, slots))

    def t(x, dtype=torch.int32):
        if isinstance(x, np.ndarray):
            return torch.from_numpy(x).to(device=device, dtype=dtype)
        return torch.tensor(x, dtype=dtype, device=device)

    def tables(reqs):
        rows = [block_tables[r.request_id] for r in reqs]
        return t([row + [0] * (width - len(row)) for row in rows]) if rows else \
            torch.zeros((0, width), dtype=torch.int32, device=device)

    return StepInputs(
        token_ids=t(ids, torch.long), positions=t(positions, torch.long),
        slot_mapping=t(slots, torch.long), num_prefill_tokens=starts[-1],
        prefill_block_tables=tables([r for r, _ in prefills]), query_start_loc=t(starts),
        context_lens=t(ctx), max_query_len=max((n for _, n in prefills), default=0),
        decode_block_tables=tables(decodes), seq_lens=t(seq_lens),
        max_seq_len=max(seq_lens, default=0), sample_index=t(sample, torch.long))

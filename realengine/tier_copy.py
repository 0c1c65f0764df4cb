"""The CPU tier of ``kv.offload`` on the real engine (``sim validate``, #43): KV blocks really
move between the model's cache (the "device" pool) and host memory, so the simulator's
transfer time (``HostTier.transfer_s``: a load's fixed cost plus its bytes over the host link)
is checked against real copies.

The simulator decides what moves (its allocator and tier are the ones the executor reads):

* **stores**: the cached blocks the GPU pool evicted to the tier while scheduling a batch
  (``OffloadBlockPool.record``) are copied to host memory before the batch's forward
  overwrites them, one gathered copy per layer and K/V into a host buffer of the batch. Host
  copies of hashes the tier has since evicted are freed.
* **loads**: each load the batch started (``SchedulerOutput.tier_loads``) copies its hashes'
  host blocks into the GPU blocks the allocator gave the request (staged untimed into one host
  buffer per load, layer-major, then one scattered copy per layer and K/V).

The copies move whole blocks as rows of machine words, as a real engine's block copy does
(vLLM's ``swap_blocks``: one memcpy / DMA per block), never element by element:
:func:`gather_rows` and :func:`scatter_rows` copy blocks as rows of the widest integer
word dividing them (:func:`block_rows`); the CPU scatters with numpy's slice or fancy
assignment (a memcpy per run or per block, in C) and gathers with ``index_select`` (whole
rows); CUDA copies a run of consecutive blocks as one slice, else ``index_copy_`` /
``index_select`` on the word rows. torch's CPU ``index_copy_`` on the bf16 cache went element by
element (TensorIterator): about 5 GB/s here against ~30 GB/s for the row copies, which made the
loads 3.7-7.5x slower than the host link predicts (benchmarks/RESULTS.md, #43). ``microbench
calibrate`` times these same two functions (``swap_in`` / ``swap_out``), the tier's bandwidth.

Both happen before the batch is timed (the simulator runs them off the step, on the host
link), each timed on its own: a :class:`TransferSample` per load, and one per batch of stores
against the link seconds the tier charged for them. The model's cache is per layer, K and V
(``realengine.model``), so a transfer is at least one copy per layer and K/V (vLLM before 0.12
laid its cache out so; since, one block is contiguous across layers), pinned host memory on CUDA. The attention check in the tests proves a loaded block holds the KV a
recomputation would produce.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from realengine.model import TinyLlama
from sim.sched.output import SchedulerOutput


@dataclass
class TransferSample:
    direction: str  # "load" (host to device) or "store" (device to host)
    blocks: int
    bytes: int
    predicted_s: float
    measured_s: float


_WORDS = {8: torch.int64, 4: torch.int32, 2: torch.int16}


def block_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` [n, *block] (contiguous blocks) as [n, words]: each block one row of the widest
    integer word that divides its bytes (a byte-exact view of any dtype)."""
    flat = t.reshape(t.shape[0], math.prod(t.shape[1:]))
    row = flat.shape[1] * t.element_size()
    return flat.view(_WORDS.get(8 if row % 8 == 0 else row & -row, torch.uint8))


def _run(blocks: list[int]) -> bool:
    """Whether ``blocks`` are consecutive ascending ids (one slice of the cache)."""
    return bool(blocks) and all(b == blocks[0] + k for k, b in enumerate(blocks))


def scatter_rows(dst: torch.Tensor, blocks: list[int], src: torch.Tensor, idx: torch.Tensor | None = None) -> None:
    """``dst[blocks[i]] = src[i]`` for every i: ``dst`` a cache's and ``src`` a buffer's
    :func:`block_rows` on the same device; ``idx``: ``blocks`` as a long tensor there (CUDA)."""
    run = _run(blocks)
    if dst.device.type == "cpu":  # numpy: one memcpy for a run, else one row memcpy per block (in C)
        dst.numpy()[slice(blocks[0], blocks[0] + len(blocks)) if run else blocks] = src.numpy()
    elif run:  # consecutive blocks: one slice copy
        dst[blocks[0]:blocks[0] + len(blocks)].copy_(src)
    else:
        dst.index_copy_(0, idx if idx is not None else torch.tensor(blocks, device=dst.device), src)


def gather_rows(src: torch.Tensor, blocks: list[int], out: torch.Tensor, idx: torch.Tensor | None = None) -> None:
    """``out[i] = src[blocks[i]]`` for every i (``src`` a cache [num_blocks, ...] or its block
    rows, ``out`` the same shape per block): torch's ``index_select``, which copies whole
    contiguous blocks (on CUDA a run of consecutive blocks is one slice)."""
    if src.device.type != "cpu" and _run(blocks):
        out.copy_(src[blocks[0]:blocks[0] + len(blocks)])
    else:
        torch.index_select(src, 0, idx if idx is not None else torch.tensor(blocks, device=src.device), out=out)


class TierCopies:
    """Real copies for the simulator's CPU tier ``allocator.tier`` (an OffloadPagedAllocator)."""

    def __init__(self, model: TinyLlama, allocator) -> None:
        self.model, self.allocator, self.tier = model, allocator, allocator.tier
        self.device = model.device
        self.caches = [c for pair in zip(model.key_caches, model.value_caches) for c in pair]
        self.rows = [block_rows(c) for c in self.caches]  # each cache's blocks as word rows
        self.pinned = self.device.type == "cuda"
        self.host: dict[int, torch.Tensor] = {}  # block hash -> [layers x (K, V), block's shape]
        self.samples: list[TransferSample] = []
        self._store_busy = self.tier.store_busy_s
        allocator.pool.record = []  # the pool lists (block, hash) of every block it stores

    def _sync(self) -> None:
        if self.pinned:
            torch.cuda.synchronize(self.device)

    def block_bytes(self) -> int:
        return sum(c[0].numel() * c.element_size() for c in self.caches)

    def stores(self) -> None:
        record, tier, host = self.allocator.pool.record, self.tier, self.host
        todo = list({h: (b, h) for b, h in record if h in tier and h not in host}.values())
        record.clear()
        predicted, self._store_busy = tier.store_busy_s - self._store_busy, tier.store_busy_s
        if todo:
            blocks = [b for b, _ in todo]
            out = torch.empty((len(self.caches), len(blocks), *self.caches[0].shape[1:]),
                              dtype=self.caches[0].dtype, pin_memory=self.pinned)
            out.zero_()  # pages touched before the clock: a tier's host memory is allocated up front (vLLM's is)
            idx = torch.tensor(blocks, device=self.device, dtype=torch.long)
            outs = [block_rows(layer) for layer in out]
            self._sync()
            t0 = time.perf_counter()
            for rows, layer in zip(self.rows, outs):  # one gathered copy per layer, K and V
                if self.pinned:  # gathered on the device, then one DMA into pinned memory
                    staged = torch.empty_like(layer, device=self.device)
                    gather_rows(rows, blocks, staged, idx)
                    layer.copy_(staged, non_blocking=True)
                else:  # the CPU: gathered straight into host memory
                    gather_rows(rows, blocks, layer, idx)
            self._sync()
            measured = time.perf_counter() - t0
            for k, (_, h) in enumerate(todo):
                host[h] = out[:, k]
            self.samples.append(TransferSample("store", len(todo), len(todo) * self.block_bytes(), predicted, measured))
        if len(host) > tier.num_resident:  # the tier evicted some: their host copies go
            for h in [h for h in host if h not in tier]:
                del host[h]

    def loads(self, out: SchedulerOutput) -> None:
        alloc = self.allocator
        for req, n in out.tier_loads:
            start = alloc._num_registered[req.request_id]  # its GPU hits; the loaded blocks follow
            hashes = req.block_hashes[start:start + n]
            blocks = alloc.block_tables[req.request_id][start:start + n]
            src = torch.stack([self.host[h] for h in hashes], dim=1)  # layer-major: each layer's blocks contiguous
            srcs = [block_rows(layer) for layer in (src.pin_memory() if self.pinned else src)]
            idx = torch.tensor(blocks, device=self.device, dtype=torch.long)
            self._sync()
            t0 = time.perf_counter()
            for rows, layer in zip(self.rows, srcs):  # one scattered copy per layer, K and V
                scatter_rows(rows, blocks, layer.to(self.device, non_blocking=self.pinned), idx)
            self._sync()
            measured = time.perf_counter() - t0
            self.samples.append(TransferSample("load", n, n * self.block_bytes(), self.tier.transfer_s(n), measured))

    def step(self, out: SchedulerOutput) -> None:
        """A batch's stores (before anything overwrites the evicted blocks), then its loads."""
        self.stores()
        if out.tier_loads:
            self.loads(out)

    def reference_bytes_per_s(self, repeats: int = 20) -> float | None:
        """One contiguous host-to-device copy of a median load's bytes, timed now (median of
        ``repeats``): the copy rate the machine gives at this moment, to read the transfer
        errors against (a loaded machine's copies are slower than its calibration's)."""
        sizes = sorted(s.bytes for s in self.samples if s.direction == "load")
        if not sizes:
            return None
        n = sizes[len(sizes) // 2] // self.caches[0].element_size()
        src = torch.ones(n, dtype=self.caches[0].dtype, pin_memory=self.pinned)
        dst = torch.empty(n, dtype=src.dtype, device=self.device)
        times = []
        for _ in range(repeats):
            self._sync()
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=self.pinned)
            self._sync()
            times.append(time.perf_counter() - t0)
        return n * src.element_size() / sorted(times)[repeats // 2]

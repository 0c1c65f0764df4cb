"""Move whole KV cache blocks: gather to a buffer (swap-out), scatter back (swap-in), copy.

Shapes::

    cache    [num_blocks, *block_shape]   any dtype; e.g. [num_blocks, block_size, num_kv_heads, head_dim]
    buffer   [n, *block_shape]            contiguous staging buffer, same dtype and device
    block_ids, src_block_ids, dst_block_ids  [n] int32 | int64

Swapping to host memory is two steps: ``gather_blocks`` packs the scattered blocks into
one contiguous device buffer, then one large DMA moves it (``swap_out_blocks`` does both
with a pinned host buffer); swap-in is the reverse (``swap_in_blocks``).

One kernel serves the three directions: its source and destination are each either
indexed by a block-id list or taken in order (constexpr flags). Grid
(n, cdiv(block_numel, BLOCK)): a program copies BLOCK elements of one block.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels._common import INDEX_DTYPES, check_devices, check_tensor, next_pow2


@triton.jit
def _copy_blocks_kernel(
    # Pointers
    src_ptr,  # [*, block_numel] viewed flat per block
    dst_ptr,  # [*, block_numel]
    src_ids_ptr,  # [n] block ids into src (read only if SRC_INDEXED)
    dst_ids_ptr,  # [n] block ids into dst (read only if DST_INDEXED)
    # Sizes and strides
    block_numel,  # elements per block
    stride_src, stride_dst,  # elements between consecutive blocks
    # Meta-parameters
    SRC_INDEXED: tl.constexpr,  # src block = src_ids[i], else i
    DST_INDEXED: tl.constexpr,  # dst block = dst_ids[i], else i
    BLOCK: tl.constexpr,  # elements per program
):
    i = tl.program_id(0)
    chunk = tl.program_id(1)

    # -- Which block from, which block to (int64: caches can exceed 2^31 elements).
    if SRC_INDEXED:
        src_block = tl.load(src_ids_ptr + i).to(tl.int64)
    else:
        src_block = i.to(tl.int64)
    if DST_INDEXED:
        dst_block = tl.load(dst_ids_ptr + i).to(tl.int64)
    else:
        dst_block = i.to(tl.int64)

    # -- Copy one BLOCK-element chunk.
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = offs < block_numel
    data = tl.load(src_ptr + src_block * stride_src + offs, mask=mask)
    tl.store(dst_ptr + dst_block * stride_dst + offs, data, mask=mask)


def _check_blocks(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor) or t.dim() < 2:
        raise ValueError(f"{name}: expected a tensor [num_blocks, *block_shape], got "
                         f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if t.shape[0] > 0 and not t[0].is_contiguous():
        raise ValueError(f"{name}: each block (all dims but the first) must be contiguous, got strides {t.stride()}")


def _check_ids(name: str, ids: torch.Tensor) -> None:
    check_tensor(name, ids, ndim=1, dtypes=INDEX_DTYPES, shape_doc="[n]")
    if ids.stride(0) != 1 and ids.shape[0] > 1:
        raise ValueError(f"{name}: must be contiguous")


def _launch(src, dst, src_ids, dst_ids, n: int) -> None:
    block_numel = math.prod(src.shape[1:])
    if n == 0 or block_numel == 0:
        return
    block = min(4096, next_pow2(block_numel))
    dummy = src_ids if src_ids is not None else dst_ids
    _copy_blocks_kernel[(n, triton.cdiv(block_numel, block))](
        src, dst,
        src_ids if src_ids is not None else dummy,
        dst_ids if dst_ids is not None else dummy,
        block_numel, src.stride(0), dst.stride(0),
        SRC_INDEXED=src_ids is not None, DST_INDEXED=dst_ids is not None, BLOCK=block,
        num_warps=4,
    )


def gather_blocks(cache: torch.Tensor, block_ids: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Return ``cache[block_ids]`` as a contiguous [n, *block_shape] buffer (swap-out staging)."""
    _check_blocks("cache", cache)
    _check_ids("block_ids", block_ids)
    n = block_ids.shape[0]
    if out is None:
        out = torch.empty((n, *cache.shape[1:]), dtype=cache.dtype, device=cache.device)
    elif tuple(out.shape) != (n, *cache.shape[1:]) or out.dtype != cache.dtype or not out.is_contiguous():
        raise ValueError(f"out: must be a contiguous {cache.dtype} tensor of shape {(n, *cache.shape[1:])}, "
                         f"got {out.dtype} {tuple(out.shape)}")
    check_devices(cache=cache, block_ids=block_ids, out=out)
    _launch(cache, out, block_ids, None, n)
    return out


def scatter_blocks(buffer: torch.Tensor, cache: torch.Tensor, block_ids: torch.Tensor) -> None:
    """In place: ``cache[block_ids[i]] = buffer[i]`` (swap-in). ``block_ids`` must be distinct."""
    _check_blocks("cache", cache)
    _check_blocks("buffer", buffer)
    _check_ids("block_ids", block_ids)
    if buffer.shape[1:] != cache.shape[1:] or buffer.dtype != cache.dtype:
        raise ValueError(f"buffer: blocks of {buffer.dtype} {tuple(buffer.shape[1:])} do not match "
                         f"cache blocks of {cache.dtype} {tuple(cache.shape[1:])}")
    if buffer.shape[0] != block_ids.shape[0]:
        raise ValueError(f"buffer: has {buffer.shape[0]} blocks but block_ids has {block_ids.shape[0]}")
    check_devices(cache=cache, buffer=buffer, block_ids=block_ids)
    _launch(buffer, cache, None, block_ids, block_ids.shape[0])


def copy_blocks(cache: torch.Tensor, src_block_ids: torch.Tensor, dst_block_ids: torch.Tensor) -> None:
    """In place: ``cache[dst[i]] = cache[src[i]]`` (copy-on-write). dst ids distinct, disjoint from src ids."""
    _check_blocks("cache", cache)
    _check_ids("src_block_ids", src_block_ids)
    _check_ids("dst_block_ids", dst_block_ids)
    if src_block_ids.shape != dst_block_ids.shape:
        raise ValueError(f"dst_block_ids: length {dst_block_ids.shape[0]} must equal "
                         f"src_block_ids length {src_block_ids.shape[0]}")
    check_devices(cache=cache, src_block_ids=src_block_ids, dst_block_ids=dst_block_ids)
    _launch(cache, cache, src_block_ids, dst_block_ids, src_block_ids.shape[0])


def swap_out_blocks(cache: torch.Tensor, block_ids: torch.Tensor, host_buffer: torch.Tensor,
                    *, staging: torch.Tensor | None = None) -> None:
    """Gather ``cache[block_ids]`` into ``staging`` on the device, then copy it to ``host_buffer``.

    ``host_buffer`` [n, *block_shape] should be pinned CPU memory; the copy is issued
    non-blocking on the current stream, so synchronize before reading it.
    """
    if host_buffer.shape[0] != block_ids.shape[0]:
        raise ValueError(f"host_buffer: has {host_buffer.shape[0]} blocks but block_ids has {block_ids.shape[0]}")
    staged = gather_blocks(cache, block_ids, out=staging)
    host_buffer.copy_(staged, non_blocking=True)


def swap_in_blocks(host_buffer: torch.Tensor, cache: torch.Tensor, block_ids: torch.Tensor,
                   *, staging: torch.Tensor | None = None) -> None:
    """Copy ``host_buffer`` to ``staging`` on the cache's device, then scatter it into ``cache[block_ids]``."""
    if staging is None:
        staging = torch.empty(host_buffer.shape, dtype=host_buffer.dtype, device=cache.device)
    staging.copy_(host_buffer, non_blocking=True)
    scatter_blocks(staging, cache, block_ids)

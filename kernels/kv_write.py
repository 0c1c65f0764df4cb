"""Store a step's new K and V into their slots of the paged KV cache.

Shapes::

    key, value    [num_tokens, num_kv_heads, head_dim]                fp16 | bf16 | fp32
    key_cache     [num_blocks, block_size, num_kv_heads, head_dim]   same dtype (value_cache alike)
    slot_mapping  [num_tokens] int32 | int64

Token ``t`` goes to block ``slot // block_size``, row ``slot % block_size`` where
``slot = slot_mapping[t]``; a negative slot marks a padding token and is skipped.

Grid (num_tokens, cdiv(num_kv_heads, BLOCK_H)): a program copies BLOCK_H heads of one
token, K and V, as [BLOCK_H, BLOCK_D] tiles.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._common import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_devices,
    check_dim,
    check_kv_cache,
    check_last_dim_contiguous,
    check_same_dtype,
    check_tensor,
    next_pow2,
)


@triton.jit
def _write_kv_cache_kernel(
    # Inputs
    key_ptr,  # [num_tokens, num_kv_heads, head_dim]
    value_ptr,  # [num_tokens, num_kv_heads, head_dim]
    slot_mapping_ptr,  # [num_tokens] int32 | int64
    # Outputs, written in place
    k_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, head_dim]
    # Strides (the last dim of every tensor is contiguous)
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_kcb, stride_kct, stride_kch,
    stride_vcb, stride_vct, stride_vch,
    # Sizes
    num_kv_heads,
    head_dim,
    # Meta-parameters
    BLOCK_SIZE: tl.constexpr,  # tokens per cache block
    BLOCK_H: tl.constexpr,  # heads per program
    BLOCK_D: tl.constexpr,  # head_dim rounded up to a power of two
):
    tok = tl.program_id(0).to(tl.int64)
    head_block = tl.program_id(1)

    # -- Where does this token go? Negative slots are padding: write nothing.
    slot = tl.load(slot_mapping_ptr + tok).to(tl.int64)
    if slot < 0:
        return
    block = slot // BLOCK_SIZE
    row = slot % BLOCK_SIZE

    # -- Copy a [BLOCK_H, BLOCK_D] tile of K and of V.
    offs_h = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (offs_h < num_kv_heads)[:, None] & (offs_d < head_dim)[None, :]
    k = tl.load(key_ptr + tok * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask)
    v = tl.load(value_ptr + tok * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask)
    tl.store(k_cache_ptr + block * stride_kcb + row * stride_kct + offs_h[:, None] * stride_kch + offs_d[None, :],
             k, mask=mask)
    tl.store(v_cache_ptr + block * stride_vcb + row * stride_vct + offs_h[:, None] * stride_vch + offs_d[None, :],
             v, mask=mask)


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write ``key``/``value`` rows into ``key_cache``/``value_cache`` at ``slot_mapping`` (in place).

    Slots must be distinct (two tokens writing one slot race) and below
    ``num_blocks * block_size``; values are trusted, not checked on the device.
    """
    doc = "[num_tokens, num_kv_heads, head_dim]"
    check_tensor("key", key, ndim=3, dtypes=FLOAT_DTYPES, shape_doc=doc)
    check_tensor("value", value, ndim=3, dtypes=FLOAT_DTYPES, shape_doc=doc)
    _, block_size, num_kv_heads, head_dim = check_kv_cache(key_cache, value_cache)
    check_same_dtype("key_cache", key_cache, key=key, value=value)
    check_tensor("slot_mapping", slot_mapping, ndim=1, dtypes=INDEX_DTYPES, shape_doc="[num_tokens]")
    num_tokens = key.shape[0]
    for name, t in (("key", key), ("value", value)):
        check_dim(name, t, 0, num_tokens, "num_tokens of key")
        check_dim(name, t, 1, num_kv_heads, "num_kv_heads of key_cache")
        check_dim(name, t, 2, head_dim, "head_dim of key_cache")
    check_dim("slot_mapping", slot_mapping, 0, num_tokens, "num_tokens of key")
    check_devices(key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping)
    check_last_dim_contiguous(key=key, value=value)
    if slot_mapping.stride(0) != 1:
        raise ValueError("slot_mapping: must be contiguous")
    if num_tokens == 0:
        return

    block_d = next_pow2(head_dim)
    block_h = min(next_pow2(num_kv_heads), max(1, 2048 // block_d))
    grid = (num_tokens, triton.cdiv(num_kv_heads, block_h))
    _write_kv_cache_kernel[grid](
        key, value, slot_mapping, key_cache, value_cache,
        key.stride(0), key.stride(1),
        value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        num_kv_heads, head_dim,
        BLOCK_SIZE=block_size, BLOCK_H=block_h, BLOCK_D=block_d,
        num_warps=4,
    )

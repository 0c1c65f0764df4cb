"""Causal prefill attention for a packed batch of prompts with cached prefixes.

This covers plain prefill, chunked prefill and prefix-cache hits with one interface
(vLLM's ``context_attention_fwd``): sequence ``s`` has ``context_lens[s]`` tokens already
in the paged cache (an earlier chunk or a shared prefix) and ``q_len_s`` new tokens packed
in ``query/key/value`` rows ``query_start_loc[s] : query_start_loc[s + 1]``. New token
``i`` sits at position ``context_lens[s] + i`` and attends to the whole cached prefix
plus the new tokens ``0..i``. The new tokens' K/V are read from ``key/value``, so it does
not matter whether ``write_kv_cache`` has stored them yet.

Shapes::

    query           [num_tokens, num_q_heads, head_dim]               fp16 | bf16 | fp32
    key, value      [num_tokens, num_kv_heads, head_dim]
    key_cache       [num_blocks, block_size, num_kv_heads, head_dim]  (value_cache alike)
    block_tables    [num_seqs, max_blocks_per_seq] int32
    query_start_loc [num_seqs + 1] int32   (cu_seqlens: 0, q_len_0, q_len_0 + q_len_1, ...)
    context_lens    [num_seqs] int32       (cached prefix tokens, 0 for a fresh prompt)
    out             [num_tokens, num_q_heads, head_dim]

Grid (cdiv(max_query_len, BLOCK_M), num_q_heads, num_seqs): a program owns BLOCK_M
query rows of one head. It first sweeps the cached prefix (no mask but the length; K/V
gathered block by block through the block table), then the new tokens up to its diagonal
(causal mask), with one online softmax in base 2 across both phases.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels._common import (
    FLOAT_DTYPES,
    check_devices,
    check_dim,
    check_head_dim,
    check_kv_cache,
    check_last_dim_contiguous,
    check_same_dtype,
    check_tensor,
    dot_in_fp32,
    dot_precision,
    interpreting,
    output_like,
)

LOG2E = 1.4426950408889634


@triton.jit
def _online_softmax_step(m_i, l_i, acc, s, v, DOT_PRECISION: tl.constexpr):
    """Fold one tile of base-2 scores s [M, N] and values v [N, D] into the running state."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _prefill_kernel(
    # Inputs
    q_ptr,  # [num_tokens, num_q_heads, HEAD_DIM]
    k_ptr,  # [num_tokens, num_kv_heads, HEAD_DIM]
    v_ptr,  # [num_tokens, num_kv_heads, HEAD_DIM]
    k_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
    v_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
    block_tables_ptr,  # [num_seqs, max_blocks_per_seq] int32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    context_lens_ptr,  # [num_seqs] int32
    # Output
    out_ptr,  # [num_tokens, num_q_heads, HEAD_DIM]
    # Strides (the last dim of every tensor is contiguous)
    stride_qt, stride_qh,
    stride_kt, stride_kh,
    stride_vt, stride_vh,
    stride_kcb, stride_kct, stride_kch,
    stride_vcb, stride_vct, stride_vch,
    stride_bt,
    stride_ot, stride_oh,
    # Scalars
    qk_scale,  # softmax scale * log2(e)
    # Meta-parameters
    QUERIES_PER_KV: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,  # tokens per cache block
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # keys per tile, a multiple of BLOCK_SIZE
    DOT_FP32: tl.constexpr,  # upcast dot operands (bf16 under the interpreter only)
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 operands, else "tf32" (no effect on fp16/bf16)
):
    m_block = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    kv_head = head // QUERIES_PER_KV

    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    if m_block * BLOCK_M >= q_len:
        return
    ctx_len = tl.load(context_lens_ptr + seq)

    # -- Load BLOCK_M query rows (indices within this sequence's new tokens).
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_mask = offs_m < q_len
    q = tl.load(q_ptr + (q_start + offs_m)[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                mask=m_mask[:, None], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # -- Phase 1: the cached prefix [0, ctx_len), visible to every new token.
    block_table = block_tables_ptr + seq * stride_bt
    for start in range(0, ctx_len, BLOCK_N):
        tok = start + offs_n
        tok_mask = tok < ctx_len
        phys = tl.load(block_table + tok // BLOCK_SIZE, mask=tok_mask, other=0).to(tl.int64)
        row = tok % BLOCK_SIZE
        k = tl.load(k_cache_ptr + (phys * stride_kcb + row * stride_kct + kv_head * stride_kch)[:, None]
                    + offs_d[None, :], mask=tok_mask[:, None], other=0.0)
        v = tl.load(v_cache_ptr + (phys * stride_vcb + row * stride_vct + kv_head * stride_vch)[:, None]
                    + offs_d[None, :], mask=tok_mask[:, None], other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        s = tl.where(tok_mask[None, :], s, float("-inf"))
        m_i, l_i, acc = _online_softmax_step(m_i, l_i, acc, s, v, DOT_PRECISION)

    # -- Phase 2: the new tokens, causally (key j visible to query i iff j <= i).
    hi = tl.minimum(q_len, (m_block + 1) * BLOCK_M)
    for start in range(0, hi, BLOCK_N):
        kj = start + offs_n
        kj_mask = kj < q_len
        k = tl.load(k_ptr + (q_start + kj)[:, None] * stride_kt + kv_head * stride_kh + offs_d[None, :],
                    mask=kj_mask[:, None], other=0.0)
        v = tl.load(v_ptr + (q_start + kj)[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
                    mask=kj_mask[:, None], other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        s = tl.where((kj[None, :] <= offs_m[:, None]) & kj_mask[None, :], s, float("-inf"))
        m_i, l_i, acc = _online_softmax_step(m_i, l_i, acc, s, v, DOT_PRECISION)

    out = acc / l_i[:, None]
    tl.store(out_ptr + (q_start + offs_m)[:, None] * stride_ot + head * stride_oh + offs_d[None, :],
             out, mask=m_mask[:, None])


def _check_args(query, key, value, key_cache, value_cache, block_tables, query_start_loc,
                context_lens) -> tuple[int, int, int, int, int]:
    """Shapes, dtypes and devices; returns (num_seqs, num_q_heads, block_size, num_kv_heads, head_dim)."""
    doc_q = "[num_tokens, num_q_heads, head_dim]"
    doc_kv = "[num_tokens, num_kv_heads, head_dim]"
    check_tensor("query", query, ndim=3, dtypes=FLOAT_DTYPES, shape_doc=doc_q)
    check_tensor("key", key, ndim=3, dtypes=FLOAT_DTYPES, shape_doc=doc_kv)
    check_tensor("value", value, ndim=3, dtypes=FLOAT_DTYPES, shape_doc=doc_kv)
    _, block_size, num_kv_heads, head_dim = check_kv_cache(key_cache, value_cache)
    check_same_dtype("query", query, key=key, value=value, key_cache=key_cache)
    check_tensor("block_tables", block_tables, ndim=2, dtypes=(torch.int32,), shape_doc="[num_seqs, max_blocks_per_seq]")
    check_tensor("query_start_loc", query_start_loc, ndim=1, dtypes=(torch.int32,), shape_doc="[num_seqs + 1]")
    check_tensor("context_lens", context_lens, ndim=1, dtypes=(torch.int32,), shape_doc="[num_seqs]")
    num_tokens, num_q_heads, _ = query.shape
    num_seqs = block_tables.shape[0]
    check_head_dim("query", head_dim)
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_dim(name, t, 2, head_dim, "head_dim of key_cache")
        check_dim(name, t, 0, num_tokens, "num_tokens of query")
    check_dim("key", key, 1, num_kv_heads, "num_kv_heads of key_cache")
    check_dim("value", value, 1, num_kv_heads, "num_kv_heads of key_cache")
    check_dim("query_start_loc", query_start_loc, 0, num_seqs + 1, "num_seqs + 1")
    check_dim("context_lens", context_lens, 0, num_seqs, "num_seqs")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"query: num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    check_devices(query=query, key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                  block_tables=block_tables, query_start_loc=query_start_loc, context_lens=context_lens)
    check_last_dim_contiguous(query=query, key=key, value=value, block_tables=block_tables)
    if query_start_loc.stride(0) != 1 or context_lens.stride(0) != 1:
        raise ValueError("query_start_loc, context_lens: must be contiguous")
    return num_seqs, num_q_heads, block_size, num_kv_heads, head_dim


def prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    scale: float | None = None,
    max_query_len: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of packed new tokens over [cached prefix; new tokens]; returns [num_tokens, Hq, D].

    ``scale`` defaults to ``1/sqrt(head_dim)``; ``max_query_len`` (max new tokens of one
    sequence) sizes the grid and is read from ``query_start_loc`` (a device sync) if not
    given. ``block_m``/``block_n`` override the tile sizes (powers of two >= 16, block_n a
    multiple of block_size). ``context_lens`` values are trusted to fit the block table.
    """
    num_seqs, num_q_heads, block_size, num_kv_heads, head_dim = _check_args(
        query, key, value, key_cache, value_cache, block_tables, query_start_loc, context_lens)
    on_gpu = not interpreting()
    block_m = block_m or (128 if on_gpu and head_dim <= 128 else 64 if on_gpu else 16)
    block_n = block_n or max(block_size, 64 if on_gpu else 16)
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if b < 16 or b & (b - 1):
            raise ValueError(f"{name}: must be a power of two >= 16, got {b}")
    if block_n % block_size:
        raise ValueError(f"block_n: must be a multiple of block_size ({block_size}), got {block_n}")
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max().item()) if num_seqs else 0
    out = output_like(out, query)
    if num_seqs == 0 or max_query_len == 0:
        return out

    qk_scale = (1.0 / math.sqrt(head_dim) if scale is None else scale) * LOG2E
    grid = (triton.cdiv(max_query_len, block_m), num_q_heads, num_seqs)
    _prefill_kernel[grid](
        query, key, value, key_cache, value_cache, block_tables, query_start_loc, context_lens, out,
        query.stride(0), query.stride(1),
        key.stride(0), key.stride(1),
        value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        block_tables.stride(0),
        out.stride(0), out.stride(1),
        qk_scale,
        QUERIES_PER_KV=num_q_heads // num_kv_heads, HEAD_DIM=head_dim, BLOCK_SIZE=block_size,
        BLOCK_M=block_m, BLOCK_N=block_n,
        DOT_FP32=dot_in_fp32(query.dtype), DOT_PRECISION=dot_precision(query.dtype),
        num_warps=8 if block_m >= 128 else 4, num_stages=2,
    )
    return out

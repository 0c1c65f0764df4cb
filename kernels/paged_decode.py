"""Paged attention for decode: one new query token per sequence, flash-decoding style.

Each sequence ``s`` has ``seq_lens[s]`` tokens of K/V in the paged cache (the new token's
K/V included: write it with ``write_kv_cache`` first). Its query attends to all of them
(no causal mask is needed: the new token is the last one).

Shapes::

    query        [num_seqs, num_q_heads, head_dim]                 fp16 | bf16 | fp32
    key_cache    [num_blocks, block_size, num_kv_heads, head_dim]  same dtype as query
    value_cache  [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables [num_seqs, max_blocks_per_seq] int32   (logical block -> physical block)
    seq_lens     [num_seqs] int32                       (tokens in the cache, >= 1)
    out          [num_seqs, num_q_heads, head_dim]      same dtype as query

Two kernels (flash-decoding): long contexts are cut into partitions of
``partition_size`` tokens so that even batch 1 fills the GPU.

1. ``_partition_kernel``, grid (num_seqs, num_kv_heads, max_num_partitions): the
   ``G = num_q_heads // num_kv_heads`` query heads that share one KV head are processed
   together (GQA packing: they are the M dimension of ``tl.dot``, padded to 16 rows),
   so each K/V tile is loaded once per group. The partition is walked in tiles of
   ``BLOCK_N`` tokens (a multiple of block_size: several whole cache blocks, found via the
   block table) with an online softmax in base 2. It writes the partition's running max,
   its sum of exponentials and its normalized partial output.
2. ``_reduce_kernel``, grid (num_seqs, num_q_heads): rescales the partitions to a common
   max and combines them: ``out = sum_p w_p o_p / sum_p w_p`` with ``w_p = l_p 2^(m_p - m)``.
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
    next_pow2,
    output_like,
)

LOG2E = 1.4426950408889634


@triton.jit
def _partition_kernel(
    # Inputs
    q_ptr,  # [num_seqs, num_q_heads, HEAD_DIM]
    k_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
    v_cache_ptr,  # [num_blocks, BLOCK_SIZE, num_kv_heads, HEAD_DIM]
    block_tables_ptr,  # [num_seqs, max_blocks_per_seq] int32
    seq_lens_ptr,  # [num_seqs] int32
    # Outputs, one entry per (seq, q head, partition); max/sum in the log2 domain
    max_logits_ptr,  # [num_seqs, num_q_heads, max_num_partitions] fp32
    exp_sums_ptr,  # [num_seqs, num_q_heads, max_num_partitions] fp32
    tmp_out_ptr,  # [num_seqs, num_q_heads, max_num_partitions, HEAD_DIM] fp32
    # Strides (the last dim of every tensor is contiguous)
    stride_qs, stride_qh,
    stride_kb, stride_kt, stride_kh,
    stride_vb, stride_vt, stride_vh,
    stride_bt,
    stride_ms, stride_mh,  # shared by max_logits and exp_sums
    stride_os, stride_oh, stride_op,
    # Scalars
    qk_scale,  # softmax scale * log2(e): scores come out in base 2
    # Meta-parameters
    QUERIES_PER_KV: tl.constexpr,  # G, query heads per KV head
    BLOCK_G: tl.constexpr,  # G padded to a power of two >= 16 (tl.dot's minimum M)
    HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,  # tokens per cache block
    BLOCK_N: tl.constexpr,  # tokens per tile, a multiple of BLOCK_SIZE
    PARTITION_SIZE: tl.constexpr,  # tokens per partition, a multiple of BLOCK_N
    DOT_FP32: tl.constexpr,  # upcast dot operands (bf16 under the interpreter only)
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 operands, else "tf32" (no effect on fp16/bf16)
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    part = tl.program_id(2)

    # Partitions past this sequence's end have nothing to do (ragged batch).
    seq_len = tl.load(seq_lens_ptr + seq)
    start = part * PARTITION_SIZE
    if start >= seq_len:
        return
    end = tl.minimum(start + PARTITION_SIZE, seq_len)

    # -- Load the G query heads of this KV group as one [BLOCK_G, HEAD_DIM] tile.
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q_heads = kv_head * QUERIES_PER_KV + offs_g
    g_mask = offs_g < QUERIES_PER_KV
    q = tl.load(q_ptr + seq * stride_qs + q_heads[:, None] * stride_qh + offs_d[None, :],
                mask=g_mask[:, None], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)

    # -- Online softmax state, fp32.
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], dtype=tl.float32)

    block_table = block_tables_ptr + seq * stride_bt
    for tile_start in range(start, end, BLOCK_N):
        # -- Map the tile's tokens to cache rows: whole blocks via the block table.
        tok = tile_start + offs_n
        tok_mask = tok < end
        phys = tl.load(block_table + tok // BLOCK_SIZE, mask=tok_mask, other=0).to(tl.int64)
        row = tok % BLOCK_SIZE
        k_off = phys * stride_kb + row * stride_kt + kv_head * stride_kh
        v_off = phys * stride_vb + row * stride_vt + kv_head * stride_vh
        k = tl.load(k_cache_ptr + k_off[:, None] + offs_d[None, :], mask=tok_mask[:, None], other=0.0)
        v = tl.load(v_cache_ptr + v_off[:, None] + offs_d[None, :], mask=tok_mask[:, None], other=0.0)
        if DOT_FP32:
            k = k.to(tl.float32)
            v = v.to(tl.float32)

        # -- Scores [BLOCK_G, BLOCK_N] in base 2; tokens past the end get -inf.
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
        s = tl.where(tok_mask[None, :], s, float("-inf"))

        # -- Online softmax: rescale what we had to the new max, add this tile.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    # -- Write this partition's max, sum and normalized output for the real heads.
    ml_off = seq * stride_ms + q_heads * stride_mh + part
    tl.store(max_logits_ptr + ml_off, m_i, mask=g_mask)
    tl.store(exp_sums_ptr + ml_off, l_i, mask=g_mask)
    o_off = seq * stride_os + q_heads[:, None] * stride_oh + part * stride_op + offs_d[None, :]
    tl.store(tmp_out_ptr + o_off, acc / l_i[:, None], mask=g_mask[:, None])


@triton.jit
def _reduce_kernel(
    # Output
    out_ptr,  # [num_seqs, num_q_heads, HEAD_DIM]
    # Inputs from _partition_kernel
    max_logits_ptr,  # [num_seqs, num_q_heads, max_num_partitions] fp32
    exp_sums_ptr,  # [num_seqs, num_q_heads, max_num_partitions] fp32
    tmp_out_ptr,  # [num_seqs, num_q_heads, max_num_partitions, HEAD_DIM] fp32
    seq_lens_ptr,  # [num_seqs] int32
    # Strides
    stride_outs, stride_outh,
    stride_ms, stride_mh,
    stride_os, stride_oh, stride_op,
    # Meta-parameters
    HEAD_DIM: tl.constexpr,
    PARTITION_SIZE: tl.constexpr,
    MAX_PARTS_POW2: tl.constexpr,  # max_num_partitions rounded up to a power of two
    BLOCK_P: tl.constexpr,  # partitions combined per step of the output loop
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    num_parts = tl.cdiv(seq_len, PARTITION_SIZE)
    ml_base = seq * stride_ms + head * stride_mh

    # -- Pass 1: global max and total weight over all partitions (scalars per partition).
    offs_p = tl.arange(0, MAX_PARTS_POW2)
    p_mask = offs_p < num_parts
    m = tl.load(max_logits_ptr + ml_base + offs_p, mask=p_mask, other=float("-inf"))
    l = tl.load(exp_sums_ptr + ml_base + offs_p, mask=p_mask, other=0.0)
    # A zero-length sequence has no partition; keep its max finite so its output is 0.
    m_max = tl.where(num_parts > 0, tl.max(m, 0), 0.0)
    total = tl.sum(l * tl.exp2(m - m_max), 0)

    # -- Pass 2: weighted sum of the partial outputs, BLOCK_P partitions at a time.
    offs_b = tl.arange(0, BLOCK_P)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for p0 in range(0, num_parts, BLOCK_P):
        pp = p0 + offs_b
        pm = pp < num_parts
        w = tl.load(exp_sums_ptr + ml_base + pp, mask=pm, other=0.0) * tl.exp2(
            tl.load(max_logits_ptr + ml_base + pp, mask=pm, other=float("-inf")) - m_max)
        o = tl.load(tmp_out_ptr + seq * stride_os + head * stride_oh + pp[:, None] * stride_op + offs_d[None, :],
                    mask=pm[:, None], other=0.0)
        acc += tl.sum(w[:, None] * o, 0)

    out = acc / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + seq * stride_outs + head * stride_outh + offs_d, out)


def _check_args(query, key_cache, value_cache, block_tables, seq_lens) -> tuple[int, int, int, int, int]:
    """Shapes, dtypes and devices; returns (num_seqs, num_q_heads, block_size, num_kv_heads, head_dim)."""
    check_tensor("query", query, ndim=3, dtypes=FLOAT_DTYPES, shape_doc="[num_seqs, num_q_heads, head_dim]")
    _, block_size, num_kv_heads, head_dim = check_kv_cache(key_cache, value_cache)
    check_same_dtype("query", query, key_cache=key_cache)
    check_tensor("block_tables", block_tables, ndim=2, dtypes=(torch.int32,), shape_doc="[num_seqs, max_blocks_per_seq]")
    check_tensor("seq_lens", seq_lens, ndim=1, dtypes=(torch.int32,), shape_doc="[num_seqs]")
    num_seqs, num_q_heads, _ = query.shape
    check_dim("query", query, 2, head_dim, "head_dim of key_cache")
    check_head_dim("query", head_dim)
    check_dim("block_tables", block_tables, 0, num_seqs, "num_seqs")
    check_dim("seq_lens", seq_lens, 0, num_seqs, "num_seqs")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"query: num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})")
    check_devices(query=query, key_cache=key_cache, value_cache=value_cache,
                  block_tables=block_tables, seq_lens=seq_lens)
    check_last_dim_contiguous(query=query, block_tables=block_tables)
    if seq_lens.stride(0) != 1:
        raise ValueError("seq_lens: must be contiguous")
    return num_seqs, num_q_heads, block_size, num_kv_heads, head_dim


def paged_attention_decode(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    scale: float | None = None,
    max_seq_len: int | None = None,
    partition_size: int = 512,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decode attention over a paged KV cache; returns ``out`` [num_seqs, num_q_heads, head_dim].

    ``scale`` defaults to ``1/sqrt(head_dim)``. ``max_seq_len`` (an upper bound of
    ``seq_lens``) sizes the grid; pass it to avoid a device sync, else it is read from
    ``seq_lens``. Query head ``h`` uses KV head ``h // (num_q_heads // num_kv_heads)``.
    ``seq_lens`` values are trusted (each must be <= max_blocks_per_seq * block_size).
    """
    num_seqs, num_q_heads, block_size, num_kv_heads, head_dim = _check_args(
        query, key_cache, value_cache, block_tables, seq_lens)
    # Tile of BLOCK_N tokens: whole cache blocks, 64 tokens or more, never past a partition.
    block_n = min(max(64, block_size), partition_size)
    if block_n < 16 or block_n & (block_n - 1) or block_n % block_size or partition_size % block_n:
        raise ValueError(f"partition_size: must be a power of two >= max(16, block_size={block_size}), "
                         f"or a multiple of max(64, block_size) when larger; got {partition_size}")
    if max_seq_len is None:
        max_seq_len = int(seq_lens.max().item()) if num_seqs else 0
    capacity = block_tables.shape[1] * block_size
    if max_seq_len > capacity:
        raise ValueError(f"seq_lens: max {max_seq_len} exceeds block_tables capacity "
                         f"({block_tables.shape[1]} blocks x {block_size} tokens = {capacity})")
    out = output_like(out, query)
    if num_seqs == 0:
        return out

    group = num_q_heads // num_kv_heads
    num_parts = max(1, triton.cdiv(max_seq_len, partition_size))
    f32 = dict(dtype=torch.float32, device=query.device)
    max_logits = torch.empty(num_seqs, num_q_heads, num_parts, **f32)
    exp_sums = torch.empty(num_seqs, num_q_heads, num_parts, **f32)
    tmp_out = torch.empty(num_seqs, num_q_heads, num_parts, head_dim, **f32)
    qk_scale = (1.0 / math.sqrt(head_dim) if scale is None else scale) * LOG2E

    _partition_kernel[(num_seqs, num_kv_heads, num_parts)](
        query, key_cache, value_cache, block_tables, seq_lens,
        max_logits, exp_sums, tmp_out,
        query.stride(0), query.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        block_tables.stride(0),
        max_logits.stride(0), max_logits.stride(1),
        tmp_out.stride(0), tmp_out.stride(1), tmp_out.stride(2),
        qk_scale,
        QUERIES_PER_KV=group, BLOCK_G=max(16, next_pow2(group)), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size, BLOCK_N=block_n, PARTITION_SIZE=partition_size,
        DOT_FP32=dot_in_fp32(query.dtype), DOT_PRECISION=dot_precision(query.dtype),
        num_warps=4, num_stages=2,
    )
    _reduce_kernel[(num_seqs, num_q_heads)](
        out, max_logits, exp_sums, tmp_out, seq_lens,
        out.stride(0), out.stride(1),
        max_logits.stride(0), max_logits.stride(1),
        tmp_out.stride(0), tmp_out.stride(1), tmp_out.stride(2),
        HEAD_DIM=head_dim, PARTITION_SIZE=partition_size,
        MAX_PARTS_POW2=max(2, next_pow2(num_parts)), BLOCK_P=max(2, min(16, next_pow2(num_parts))),
        num_warps=4,
    )
    return out

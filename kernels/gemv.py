"""Skinny GEMM for decode: ``y = x @ weight.T`` with few rows in x (1 to 64 tokens).

Shapes::

    x       [M, K]   fp16 | bf16 | fp32, M small (a decode batch)
    weight  [N, K]   same dtype (torch.nn.Linear layout: out_features x in_features)
    y       [M, N]   same dtype, accumulated in fp32

At small M the cost is reading ``weight`` once, so the kernel is tiled for bandwidth:
all M rows sit in one BLOCK_M tile (padded to 16, tl.dot's minimum), the weight is cut
into narrow BLOCK_N column panels so that there are enough programs to keep every SM
streaming, and when N alone cannot supply them the K dimension is split too (split-K:
each program adds its fp32 partial sum into a zeroed fp32 buffer with an atomic add).

Grid (cdiv(N, BLOCK_N), cdiv(M, BLOCK_M), SPLIT_K).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._common import (
    FLOAT_DTYPES,
    check_devices,
    check_dim,
    check_same_dtype,
    check_last_dim_contiguous,
    check_tensor,
    dot_in_fp32,
    dot_precision,
    next_pow2,
    num_sms,
)


@triton.jit
def _decode_gemv_kernel(
    # Pointers
    x_ptr,  # [M, K]
    w_ptr,  # [N, K]
    y_ptr,  # [M, N]: x's dtype, or fp32 zeros when SPLIT_K > 1
    # Sizes
    M, N, K,
    k_per_split,  # K elements per split, a multiple of BLOCK_K
    # Strides (the last dim of every tensor is contiguous)
    stride_xm, stride_wn, stride_ym,
    # Meta-parameters
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr,  # every K tile is full: no K mask, so loads vectorize
    DOT_FP32: tl.constexpr,  # upcast dot operands (bf16 under the interpreter only)
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 operands, else "tf32" (no effect on fp16/bf16)
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_mask = offs_m < M
    n_mask = offs_n < N
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn

    # -- Stream this program's [BLOCK_N, k_per_split] panel of the weight.
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    for k0 in range(k_start, k_end, BLOCK_K):
        kk = k0 + offs_k
        if EVEN_K:
            x = tl.load(x_rows + kk[None, :], mask=m_mask[:, None], other=0.0)  # [BLOCK_M, BLOCK_K]
            w = tl.load(w_rows + kk[None, :], mask=n_mask[:, None], other=0.0)  # [BLOCK_N, BLOCK_K]
        else:
            k_mask = kk < k_end
            x = tl.load(x_rows + kk[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)
            w = tl.load(w_rows + kk[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0)
        if DOT_FP32:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        acc += tl.dot(x, tl.trans(w), input_precision=DOT_PRECISION)

    # -- Write (or, split-K, accumulate) the [BLOCK_M, BLOCK_N] tile of y.
    y_ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    mask = m_mask[:, None] & n_mask[None, :]
    if SPLIT_K == 1:
        tl.store(y_ptrs, acc, mask=mask)
    else:
        tl.atomic_add(y_ptrs, acc, mask=mask)


def _pick_tiles(M: int, N: int, K: int, sms: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K): the widest N panel that still gives ~2 programs per SM."""
    block_m = min(64, max(16, next_pow2(M)))
    block_k = 256 if block_m <= 16 else 128
    m_tiles = triton.cdiv(M, block_m)
    block_n = 16
    for candidate in (64, 32):
        if triton.cdiv(N, candidate) * m_tiles >= 2 * sms:
            block_n = candidate
            break
    programs = triton.cdiv(N, block_n) * m_tiles
    split_k = 1
    if programs < sms:
        split_k = max(1, min(triton.cdiv(2 * sms, programs), K // (4 * block_k)))
    return block_m, block_n, block_k, split_k


def decode_gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    split_k: int | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x @ weight.T`` for skinny x; returns [M, N] in x's dtype.

    ``split_k`` forces the number of K splits (None: chosen from the shape and the
    GPU's SM count). With split_k > 1 the fp32 partial sums are added atomically, so the
    rounding of the result may differ from run to run in the last bits.
    """
    check_tensor("x", x, ndim=2, dtypes=FLOAT_DTYPES, shape_doc="[M, K]")
    check_tensor("weight", weight, ndim=2, dtypes=FLOAT_DTYPES, shape_doc="[N, K]")
    check_same_dtype("x", x, weight=weight)
    M, K = x.shape
    N = weight.shape[0]
    check_dim("weight", weight, 1, K, "K, the last dim of x")
    check_devices(x=x, weight=weight)
    check_last_dim_contiguous(x=x, weight=weight)
    if split_k is not None and split_k < 1:
        raise ValueError(f"split_k: must be >= 1, got {split_k}")
    if out is None:
        out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    else:
        check_tensor("out", out, ndim=2, dtypes=(x.dtype,), shape_doc="[M, N]")
        if tuple(out.shape) != (M, N):
            raise ValueError(f"out: shape {tuple(out.shape)} must be {(M, N)}")
        check_devices(x=x, out=out)
        check_last_dim_contiguous(out=out)
    if M == 0 or N == 0:
        return out
    if K == 0:
        return out.zero_()

    block_m, block_n, block_k, auto_split = _pick_tiles(M, N, K, num_sms(x.device))
    split = auto_split if split_k is None else split_k
    k_per_split = triton.cdiv(triton.cdiv(K, split), block_k) * block_k
    split = triton.cdiv(K, k_per_split)  # no empty splits
    y = out if split == 1 else torch.zeros(M, N, dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(N, block_n), triton.cdiv(M, block_m), split)
    _decode_gemv_kernel[grid](
        x, weight, y,
        M, N, K, k_per_split,
        x.stride(0), weight.stride(0), y.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, EVEN_K=K % block_k == 0,
        DOT_FP32=dot_in_fp32(x.dtype), DOT_PRECISION=dot_precision(x.dtype),
        num_warps=4, num_stages=4,
    )
    if y is not out:
        out.copy_(y)
    return out

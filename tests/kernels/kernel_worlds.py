"""Tiny paged-KV worlds for the kernel tests: dense K/V per sequence, scattered into a cache.

Every random tensor comes from a generator seeded by the test's parameters, so a case
draws fresh inputs yet reruns identically.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch

# Tolerances per dtype, against references computed in fp32 and rounded to the dtype.
TOL = {
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=3e-3, rtol=1e-2),
    torch.bfloat16: dict(atol=3e-2, rtol=2e-2),
}


def generator(*params: object) -> torch.Generator:
    """A CPU generator seeded from the case's parameters."""
    return torch.Generator().manual_seed(zlib.crc32(repr(params).encode()))


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


@dataclass
class PagedWorld:
    """Dense per-sequence K/V and the same tokens in a paged cache (unused rows are NaN)."""

    keys: list[torch.Tensor]  # per sequence [num_tokens, num_kv_heads, head_dim]
    values: list[torch.Tensor]
    key_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32, shuffled physical blocks


def paged_world(g: torch.Generator, lens: list[int], *, block_size: int, num_kv_heads: int,
                head_dim: int, dtype: torch.dtype, spare_blocks: int = 3) -> PagedWorld:
    """Scatter each sequence's tokens over randomly chosen, non-contiguous physical blocks.

    Rows no token owns stay NaN, so a kernel that reads outside a sequence fails loudly.
    """
    max_blocks = max(1, max(math.ceil(n / block_size) for n in lens))
    num_blocks = len(lens) * max_blocks + spare_blocks
    perm = torch.randperm(num_blocks, generator=g)
    block_tables = perm[: len(lens) * max_blocks].reshape(len(lens), max_blocks).to(torch.int32)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.full(shape, float("nan"), dtype=dtype)
    value_cache = torch.full(shape, float("nan"), dtype=dtype)
    keys, values = [], []
    for s, n in enumerate(lens):
        k = randn(g, n, num_kv_heads, head_dim, dtype=dtype)
        v = randn(g, n, num_kv_heads, head_dim, dtype=dtype)
        for t in range(n):
            block = block_tables[s, t // block_size]
            key_cache[block, t % block_size] = k[t]
            value_cache[block, t % block_size] = v[t]
        keys.append(k)
        values.append(v)
    return PagedWorld(keys, values, key_cache, value_cache, block_tables)


def dense_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v, head by head, in float64.

    q [Lq, Hq, D] are the *last* Lq positions of k/v [Lk, Hkv, D]; query head h reads
    KV head h // (Hq // Hkv). Returns [Lq, Hq, D] float64.
    """
    lq, hq, d = q.shape
    lk, hkv, _ = k.shape
    out = torch.empty(lq, hq, d, dtype=torch.float64)
    for h in range(hq):
        kh = k[:, h // (hq // hkv)].double()
        vh = v[:, h // (hq // hkv)].double()
        scores = q[:, h].double() @ kh.T / math.sqrt(d)  # [Lq, Lk]
        pos_q = torch.arange(lk - lq, lk)[:, None]
        scores = scores.masked_fill(torch.arange(lk)[None, :] > pos_q, float("-inf"))
        out[:, h] = torch.softmax(scores, dim=-1) @ vh
    return out


def prefill_batch(g, q_lens, ctx_lens, block_size, hq, hkv, d, dtype):
    """Prefixes in a paged cache plus packed new tokens; returns (world, args for prefill_attention)."""
    world = paged_world(g, ctx_lens, block_size=block_size, num_kv_heads=hkv, head_dim=d, dtype=dtype)
    # Room in each block table for the new tokens too, as an engine would reserve.
    need = max(-(-(c + q) // block_size) for c, q in zip(ctx_lens, q_lens))
    extra = torch.full((len(q_lens), need - world.block_tables.shape[1]), 0, dtype=torch.int32)
    block_tables = torch.cat([world.block_tables, extra], dim=1) if need > world.block_tables.shape[1] \
        else world.block_tables
    num_tokens = sum(q_lens)
    query = randn(g, num_tokens, hq, d, dtype=dtype)
    key = randn(g, num_tokens, hkv, d, dtype=dtype)
    value = randn(g, num_tokens, hkv, d, dtype=dtype)
    query_start_loc = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    context_lens = torch.tensor(ctx_lens, dtype=torch.int32)
    return world, (query, key, value, world.key_cache, world.value_cache, block_tables,
                   query_start_loc, context_lens)

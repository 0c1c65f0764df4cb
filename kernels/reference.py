"""Plain torch references of every kernel: same arguments, same results, no Triton.

They favour being obviously right over being fast: loops over sequences, fp32 math,
K/V gathered from the paged cache through the block table. Shapes and the cache layout
are those of the kernels (see kernels/README.md).
"""

from __future__ import annotations

import math

import torch

QUERY_TILE = 128  # prefill_attention_ref's query tile (rows of new tokens per matmul)


def gather_paged_kv(cache: torch.Tensor, block_table: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """The first ``num_tokens`` tokens of one sequence, contiguous: [num_tokens, num_kv_heads, head_dim]."""
    block_size = cache.shape[1]
    num_blocks = -(-num_tokens // block_size)
    blocks = cache[block_table[:num_blocks].long()]  # [num_blocks, block_size, H, D]
    return blocks.reshape(-1, *cache.shape[2:])[:num_tokens]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None) -> torch.Tensor:
    """q [Lq, Hq, D], k/v [Lk, Hkv, D], mask [Lq, Lk] bool (True = may attend) -> [Lq, Hq, D] fp32.

    Grouped-query attention as the kernels do it: the ``Hq / Hkv`` query heads of a group
    share their KV head's keys, read once (K/V are not expanded to ``Hq`` heads).
    """
    lq, hq, d = q.shape
    hkv = k.shape[1]
    qg = q.float().reshape(lq, hkv, hq // hkv, d).permute(1, 2, 0, 3)  # [Hkv, group, Lq, D]
    kt = k.float().permute(1, 2, 0).unsqueeze(1)  # [Hkv, 1, D, Lk]
    scores = (qg @ kt) * scale  # [Hkv, group, Lq, Lk]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v.float().permute(1, 0, 2).unsqueeze(1)  # [Hkv, group, Lq, D]
    return out.permute(2, 0, 1, 3).reshape(lq, hq, d)


def paged_attention_decode_ref(query, key_cache, value_cache, block_tables, seq_lens, *, scale=None):
    """query [num_seqs, Hq, D] -> [num_seqs, Hq, D] (query dtype)."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    out = torch.empty_like(query)
    for s in range(query.shape[0]):
        n = int(seq_lens[s])
        k = gather_paged_kv(key_cache, block_tables[s], n)
        v = gather_paged_kv(value_cache, block_tables[s], n)
        out[s] = _attend(query[s : s + 1], k, v, scale, None)[0].to(query.dtype)
    return out


def prefill_attention_ref(query, key, value, key_cache, value_cache, block_tables,
                          query_start_loc, context_lens, *, scale=None):
    """Causal attention of packed new tokens over [cached prefix; themselves].

    query [num_tokens, Hq, D], key/value [num_tokens, Hkv, D] -> [num_tokens, Hq, D].
    New token i of sequence s sits at position context_lens[s] + i and sees positions <= its own.
    """
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    out = torch.empty_like(query)
    for s in range(block_tables.shape[0]):
        lo, hi = int(query_start_loc[s]), int(query_start_loc[s + 1])
        ctx = int(context_lens[s])
        k = torch.cat([gather_paged_kv(key_cache, block_tables[s], ctx), key[lo:hi]]).float()
        v = torch.cat([gather_paged_kv(value_cache, block_tables[s], ctx), value[lo:hi]]).float()
        # Queries in tiles of QUERY_TILE: each tile reads only the keys it may see, so the
        # work follows the causal (query, key) pairs, as the kernel's does.
        for a in range(lo, hi, QUERY_TILE):
            b = min(a + QUERY_TILE, hi)
            q_pos = ctx + torch.arange(a - lo, b - lo, device=query.device)
            n_keys = ctx + b - lo
            mask = torch.arange(n_keys, device=query.device)[None, :] <= q_pos[:, None]
            out[a:b] = _attend(query[a:b], k[:n_keys], v[:n_keys], scale, mask).to(query.dtype)
    return out


def write_kv_cache_ref(key, value, key_cache, value_cache, slot_mapping):
    """In place: token t goes to slot slot_mapping[t] (block * block_size + row); negative = skip."""
    block_size = key_cache.shape[1]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot >= 0:
            key_cache[slot // block_size, slot % block_size] = key[t]
            value_cache[slot // block_size, slot % block_size] = value[t]


def decode_gemv_ref(x, weight):
    """x [M, K] @ weight[N, K]^T -> [M, N], fp32 accumulation, x's dtype."""
    return (x.float() @ weight.float().t()).to(x.dtype)


def gather_blocks_ref(cache, block_ids):
    """cache [num_blocks, *block_shape] -> [len(block_ids), *block_shape]."""
    return cache[block_ids.long()].clone()


def scatter_blocks_ref(buffer, cache, block_ids):
    """In place: cache[block_ids[i]] = buffer[i]."""
    cache[block_ids.long()] = buffer


def copy_blocks_ref(cache, src_block_ids, dst_block_ids):
    """In place: cache[dst[i]] = cache[src[i]] (reads all sources first)."""
    cache[dst_block_ids.long()] = cache[src_block_ids.long()].clone()

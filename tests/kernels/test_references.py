"""The torch references against dense attention written out the obvious way."""

import pytest
import torch
from kernel_worlds import dense_causal_attention, generator, paged_world, prefill_batch, randn

from kernels.reference import paged_attention_decode_ref, prefill_attention_ref

F32 = dict(atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_size,hq,hkv", [(8, 4, 2), (16, 3, 1)])
def test_decode_reference_is_dense_attention(block_size, hq, hkv):
    g = generator("ref-decode", block_size, hq, hkv)
    lens = [1, 2 * block_size, 29]
    world = paged_world(g, lens, block_size=block_size, num_kv_heads=hkv, head_dim=16, dtype=torch.float32)
    query = randn(g, len(lens), hq, 16, dtype=torch.float32)
    got = paged_attention_decode_ref(query, world.key_cache, world.value_cache, world.block_tables,
                                     torch.tensor(lens, dtype=torch.int32))
    for s in range(len(lens)):
        want = dense_causal_attention(query[s : s + 1], world.keys[s], world.values[s])[0]
        torch.testing.assert_close(got[s].double(), want, **F32)


@pytest.mark.parametrize("block_size", [8, 16])
def test_prefill_reference_is_dense_causal_attention(block_size):
    g = generator("ref-prefill", block_size)
    q_lens, ctx_lens = [5, 9, 3], [0, 11, block_size]
    world, args = prefill_batch(g, q_lens, ctx_lens, block_size, 4, 2, 16, torch.float32)
    _check_prefill_against_dense(world, args)


def test_prefill_reference_tiles_long_prompts_exactly():
    """Prompts longer than the reference's query tile are split; the result must not change."""
    from kernels.reference import QUERY_TILE

    g = generator("ref-prefill-long", 16)
    q_lens, ctx_lens = [2 * QUERY_TILE + 37, QUERY_TILE], [0, 40]
    world, args = prefill_batch(g, q_lens, ctx_lens, 16, 4, 2, 16, torch.float32)
    _check_prefill_against_dense(world, args)


def _check_prefill_against_dense(world, args) -> None:
    """Each sequence's new tokens against dense causal attention over [cached; new]."""
    query, key, value, *_, query_start_loc, _ = args
    got = prefill_attention_ref(*args)
    for s in range(len(world.keys)):
        lo, hi = int(query_start_loc[s]), int(query_start_loc[s + 1])
        k = torch.cat([world.keys[s], key[lo:hi]])
        v = torch.cat([world.values[s], value[lo:hi]])
        torch.testing.assert_close(got[lo:hi].double(), dense_causal_attention(query[lo:hi], k, v), **F32)

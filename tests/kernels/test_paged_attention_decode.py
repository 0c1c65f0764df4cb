"""paged_attention_decode against its torch reference (interpreter, tiny shapes)."""

import pytest
import torch
from kernel_worlds import TOL, generator, paged_world, randn

from kernels import paged_attention_decode
from kernels.reference import paged_attention_decode_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# (block_size, num_q_heads, num_kv_heads, head_dim): GQA, MQA, MHA; block sizes 8/16/32; head dims 64/128.
CONFIGS = [(8, 8, 2, 64), (16, 4, 1, 128), (32, 2, 2, 64)]


def _run(g, lens, block_size, hq, hkv, d, dtype, **kwargs):
    world = paged_world(g, lens, block_size=block_size, num_kv_heads=hkv, head_dim=d, dtype=dtype)
    query = randn(g, len(lens), hq, d, dtype=dtype)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    out = torch.full_like(query, float("nan"))  # poisoned: an unwritten element fails
    paged_attention_decode(query, world.key_cache, world.value_cache, world.block_tables, seq_lens,
                           out=out, **kwargs)
    ref = paged_attention_decode_ref(query, world.key_cache, world.value_cache, world.block_tables, seq_lens)
    return out, ref


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_size,hq,hkv,d", CONFIGS)
def test_matches_reference_ragged_multi_partition(dtype, block_size, hq, hkv, d):
    # Lengths: a single token, an exact multiple of the block size, a ragged one, and one
    # spanning 3 partitions of 128 tokens (2 tiles of 64 each).
    lens = [1, 5 * block_size, 37, 300]
    g = generator("decode", dtype, block_size, hq, hkv, d)
    out, ref = _run(g, lens, block_size, hq, hkv, d, dtype, partition_size=128)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_default_partition_long_context(dtype):
    # 700 tokens: two partitions of 512, the second partly filled; batch of 1.
    g = generator("decode-long", dtype)
    out, ref = _run(g, [700], 16, 8, 1, 64, dtype, max_seq_len=700)
    torch.testing.assert_close(out, ref, **TOL[dtype])


def test_scale_and_small_partition():
    g = generator("decode-scale")
    lens = [33, 64, 65]
    world = paged_world(g, lens, block_size=16, num_kv_heads=2, head_dim=64, dtype=torch.float32)
    query = randn(g, 3, 4, 64, dtype=torch.float32)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    out = paged_attention_decode(query, world.key_cache, world.value_cache, world.block_tables, seq_lens,
                                 scale=0.3, partition_size=32)
    ref = paged_attention_decode_ref(query, world.key_cache, world.value_cache, world.block_tables, seq_lens,
                                     scale=0.3)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])


def _args():
    kc = torch.zeros(4, 16, 2, 64)
    return dict(query=torch.zeros(2, 4, 64), key_cache=kc, value_cache=kc.clone(),
                block_tables=torch.zeros(2, 2, dtype=torch.int32), seq_lens=torch.ones(2, dtype=torch.int32))


@pytest.mark.parametrize("name,bad", [
    ("query", torch.zeros(2, 4, 32)),
    ("query", torch.zeros(2, 3, 64)),
    ("value_cache", torch.zeros(4, 16, 2, 64, dtype=torch.float16)),
    ("block_tables", torch.zeros(2, 2, dtype=torch.int64)),
    ("seq_lens", torch.ones(3, dtype=torch.int32)),
    ("seq_lens", torch.full((2,), 33, dtype=torch.int32)),
])
def test_bad_arguments_name_the_argument(name, bad):
    args = _args()
    args[name] = bad
    with pytest.raises(ValueError, match=rf"^{name}:"):
        paged_attention_decode(**args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("hq,hkv", [(6, 2), (32, 1)])  # group of 3 padded to 16; group of 32 (BLOCK_G 32)
def test_group_sizes_other_than_16(dtype, hq, hkv):
    g = generator("decode-groups", dtype, hq, hkv)
    out, ref = _run(g, [19, 64], 16, hq, hkv, 64, dtype, partition_size=64)
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("partition_size", [8, 48, 96])
def test_partition_size_must_tile_whole_blocks(partition_size):
    with pytest.raises(ValueError, match="^partition_size:"):
        paged_attention_decode(**_args(), partition_size=partition_size)


def test_empty_sequence_gets_zeros():
    g = generator("decode-empty")
    world = paged_world(g, [0, 5], block_size=8, num_kv_heads=1, head_dim=64, dtype=torch.float32)
    query = randn(g, 2, 2, 64, dtype=torch.float32)
    seq_lens = torch.tensor([0, 5], dtype=torch.int32)
    out = paged_attention_decode(query, world.key_cache, world.value_cache, world.block_tables, seq_lens)
    assert torch.equal(out[0], torch.zeros(2, 64))
    ref = paged_attention_decode_ref(query[1:], world.key_cache, world.value_cache, world.block_tables[1:],
                                     seq_lens[1:])
    torch.testing.assert_close(out[1:], ref, **TOL[torch.float32])

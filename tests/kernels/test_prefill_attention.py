"""prefill_attention against its torch reference: packed prompts, cached prefixes, causal."""

import pytest
import torch
from kernel_worlds import TOL, generator, prefill_batch

from kernels import prefill_attention
from kernels.reference import prefill_attention_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
CONFIGS = [(8, 8, 2, 64), (16, 4, 1, 128), (32, 2, 2, 64)]  # (block_size, Hq, Hkv, head_dim)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("block_size,hq,hkv,d", CONFIGS)
def test_matches_reference(dtype, block_size, hq, hkv, d):
    # A fresh prompt, a prefix of exactly 2 blocks, a ragged prefix, a 1-token chunk;
    # new-token counts cross several BLOCK_M=16 query tiles.
    q_lens = [37, 20, 16, 1]
    ctx_lens = [0, 2 * block_size, 45, 3]
    g = generator("prefill", dtype, block_size, hq, hkv, d)
    _, args = prefill_batch(g, q_lens, ctx_lens, block_size, hq, hkv, d, dtype)
    out = torch.full_like(args[0], float("nan"))
    prefill_attention(*args, out=out)
    torch.testing.assert_close(out, prefill_attention_ref(*args), **TOL[dtype])


@pytest.mark.parametrize("block_m,block_n", [(32, 64), (16, 32)])
def test_tile_sizes_do_not_change_the_result(block_m, block_n):
    g = generator("prefill-tiles", block_m, block_n)
    _, args = prefill_batch(g, [50, 7], [70, 0], 16, 4, 2, 64, torch.float32)
    out = prefill_attention(*args, block_m=block_m, block_n=block_n, max_query_len=50)
    torch.testing.assert_close(out, prefill_attention_ref(*args), **TOL[torch.float32])


def test_block_n_must_cover_whole_blocks():
    g = generator("prefill-bad-n")
    _, args = prefill_batch(g, [4], [4], 32, 2, 1, 64, torch.float32)
    with pytest.raises(ValueError, match="^block_n:"):
        prefill_attention(*args, block_n=16)


@pytest.mark.parametrize("index,name,bad", [
    (1, "key", torch.zeros(5, 2, 64)),  # wrong num_tokens
    (2, "value", torch.zeros(4, 1, 32)),  # wrong head_dim
    (6, "query_start_loc", torch.tensor([0, 4], dtype=torch.int64)),
    (7, "context_lens", torch.tensor([0, 0], dtype=torch.int32)),
])
def test_bad_arguments_name_the_argument(index, name, bad):
    g = generator("prefill-bad")
    _, args = prefill_batch(g, [4], [4], 16, 2, 1, 64, torch.float32)
    args = list(args)
    args[index] = bad
    with pytest.raises(ValueError, match=rf"^{name}:"):
        prefill_attention(*args)

"""gather_blocks / scatter_blocks / copy_blocks / swaps against their references, exactly."""

import pytest
import torch
from kernel_worlds import generator, randn

from kernels import copy_blocks, gather_blocks, scatter_blocks, swap_in_blocks, swap_out_blocks
from kernels.reference import copy_blocks_ref, gather_blocks_ref, scatter_blocks_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=str)
def test_gather_then_scatter(dtype, ids_dtype):
    g = generator("blocks", dtype, ids_dtype)
    cache = randn(g, 9, 16, 2, 64, dtype=dtype)
    ids = torch.tensor([7, 0, 3, 8], dtype=ids_dtype)  # shuffled, non-contiguous
    out = torch.full((4, 16, 2, 64), float("nan"), dtype=dtype)
    gather_blocks(cache, ids, out=out)
    assert torch.equal(out, gather_blocks_ref(cache, ids))

    buffer = randn(g, 4, 16, 2, 64, dtype=dtype)
    got, want = cache.clone(), cache.clone()
    scatter_blocks(buffer, got, ids)
    scatter_blocks_ref(buffer, want, ids)
    assert torch.equal(got, want)


def test_copy_blocks_in_place():
    g = generator("copy")
    cache = randn(g, 6, 8, 1, 32, dtype=torch.float16)
    src, dst = torch.tensor([0, 4]), torch.tensor([5, 1])
    want = cache.clone()
    copy_blocks(cache, src, dst)
    copy_blocks_ref(want, src, dst)
    assert torch.equal(cache, want)


def test_swap_round_trip():
    # Under the interpreter the "host" buffer and the cache are both CPU tensors.
    g = generator("swap")
    cache = randn(g, 5, 8, 2, 16, dtype=torch.bfloat16)
    ids = torch.tensor([4, 1])
    host = torch.empty(2, 8, 2, 16, dtype=torch.bfloat16)
    swap_out_blocks(cache, ids, host)
    assert torch.equal(host, cache[ids])
    restored = torch.zeros_like(cache)
    swap_in_blocks(host, restored, torch.tensor([0, 2]))
    assert torch.equal(restored[[0, 2]], cache[ids])
    assert not restored[[1, 3, 4]].any()


def test_odd_block_numel_and_empty_list():
    cache = torch.arange(3 * 5 * 7, dtype=torch.float32).reshape(3, 5, 7)  # 35 elements, not a power of two
    assert torch.equal(gather_blocks(cache, torch.tensor([2, 0])), cache[[2, 0]])
    assert gather_blocks(cache, torch.tensor([], dtype=torch.int64)).shape == (0, 5, 7)


@pytest.mark.parametrize("call,name", [
    (lambda c: gather_blocks(c, torch.tensor([0.0])), "block_ids"),
    (lambda c: scatter_blocks(torch.zeros(2, 4, 8), c, torch.tensor([0])), "buffer"),
    (lambda c: copy_blocks(c, torch.tensor([0]), torch.tensor([1, 2])), "dst_block_ids"),
    (lambda c: gather_blocks(c.transpose(1, 2), torch.tensor([0])), "cache"),
])
def test_bad_arguments_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        call(torch.zeros(3, 4, 8))

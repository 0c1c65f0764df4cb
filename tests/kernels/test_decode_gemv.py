"""decode_gemv against x.float() @ w.float().T for skinny M, with and without split-K."""

import pytest
import torch
from kernel_worlds import generator, randn

from kernels import decode_gemv
from kernels.reference import decode_gemv_ref

# K up to 520 sums many products: fp32 is checked at a K-scaled tolerance.
TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-5),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=5e-2, rtol=1e-2),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("M,N,K,split_k", [
    (1, 48, 300, None),  # auto: tiny N on a "132-SM" device -> split-K
    (5, 100, 64, 1),
    (16, 96, 512, 1),
    (33, 40, 520, 3),  # uneven split, M padded to 64
    (64, 20, 256, 2),
])
def test_matches_reference(dtype, M, N, K, split_k):
    g = generator("gemv", dtype, M, N, K, split_k)
    x = randn(g, M, K, dtype=dtype)
    w = randn(g, N, K, dtype=dtype) / K**0.5
    out = torch.full((M, N), float("nan"), dtype=dtype)
    decode_gemv(x, w, split_k=split_k, out=out)
    torch.testing.assert_close(out, decode_gemv_ref(x, w), **TOL[dtype])


def test_strided_rows():
    g = generator("gemv-strided")
    x = randn(g, 4, 128, dtype=torch.float32)[:, :64]  # row stride 128, last dim contiguous
    w = randn(g, 32, 64, dtype=torch.float32)
    torch.testing.assert_close(decode_gemv(x, w), decode_gemv_ref(x, w), **TOL[torch.float32])


@pytest.mark.parametrize("name,kwargs", [
    ("weight", dict(weight=torch.zeros(8, 32))),
    ("weight", dict(weight=torch.zeros(8, 64, dtype=torch.float16))),
    ("x", dict(x=torch.zeros(64, 2).t())),  # last dim not contiguous
    ("split_k", dict(split_k=0)),
])
def test_bad_arguments_name_the_argument(name, kwargs):
    args = dict(x=torch.zeros(2, 64), weight=torch.zeros(8, 64)) | kwargs
    with pytest.raises(ValueError, match=rf"^{name}:"):
        decode_gemv(**args)

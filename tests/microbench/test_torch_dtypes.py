"""The torch element types of the real engine and the microbenchmarks follow the one dtype table."""

from __future__ import annotations

import pytest

from sim.model.dtypes import DTYPE_BYTES

torch = pytest.importorskip("torch")


def test_torch_dtypes_are_keyed_by_the_tables_names_and_sizes() -> None:
    from realengine.model import TORCH_DTYPES

    assert {"fp32", "fp16", "bf16"} <= set(TORCH_DTYPES) <= set(DTYPE_BYTES)
    for name, dtype in TORCH_DTYPES.items():
        assert torch.empty(0, dtype=dtype).element_size() == DTYPE_BYTES[name]


def test_case_inputs_are_sized_and_typed_from_the_tables() -> None:
    from microbench.cases import input_bytes, make_fns

    shape = {"m": 4, "n": 8, "k": 16}
    assert input_bytes("gemm", {**shape, "dtype": "fp32"}) == 2 * input_bytes("gemm", {**shape, "dtype": "bf16"})
    (fn,) = make_fns("gemm", {**shape, "dtype": "fp32"}, torch.device("cpu"), 1)
    assert fn().dtype == torch.float32

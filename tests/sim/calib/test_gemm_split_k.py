"""The GEMM's split-k term (sim/calib/gemm_tiles.py): by hand, monotone in m, n and k, validated,
round-tripped, and off (the old predictions) without its parameters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calib.gemm_tiles import executed_flops, k_splits, work_scale
from sim.calib.kernel_models import KernelFit, kernel_fit_from_dict
from sim.errors import ConfigError

TILED = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 8e14, "x_half": 0.0, "overhead_s": 3e-6, "item_s": 0.0,
         "sharpness": 3.0, "sm_count": 132.0, "tile_m": 128.0, "tile_n": 128.0, "wave_tail": 0.5, "k_half": 100.0,
         "small_max_m": 64.0, "small_tile_m": 64.0, "small_efficiency": 1.0, "mid_max_m": 256.0,
         "mid_tile_m": 64.0, "mid_efficiency": 1.0}
SPLIT = {**TILED, "split_k_len": 2048.0, "max_split_k": 8.0}


def test_splits_by_hand() -> None:
    assert k_splits(SPLIT, 1024) == 1.0 and k_splits(SPLIT, 8192) == 4.0 and k_splits(SPLIT, 65536) == 8.0
    assert k_splits(TILED, 65536) == 1.0
    # 16 tokens x n 128: one 64 x 128 tile; k 8192 in 4 chunks: 4 CTAs of 132, each 2048 + 100 deep
    paid = 4 / 132 + 0.5 * (1 - 4 / 132)
    assert executed_flops(SPLIT, 16, 128, 8192) == pytest.approx(paid * 132 * 64 * 128 * 2 * (2048 + 100))
    unsplit = (1 / 132 + 0.5 * (1 - 1 / 132)) * 132 * 64 * 128 * 2 * (8192 + 100)
    assert executed_flops(TILED, 16, 128, 8192) == pytest.approx(unsplit)
    # 132 full tiles: 2 waves once split in two (the waves count tiles x splits)
    assert work_scale(SPLIT, 4096, 128 * 4, 4096 * 4) > work_scale(TILED, 4096, 128 * 4, 4096 * 4) * 0.99


def test_a_long_k_on_few_tiles_plateaus() -> None:
    """The skinny GEMM's time stops growing with k while the splits are not capped."""
    fit_ = KernelFit("gemm", SPLIT)
    times = [fit_.analytic_s(m=16, n=64, k=k, dtype="bf16") for k in (2048, 4096, 8192, 16384)]
    assert times[-1] < 1.5 * times[0]
    plain = KernelFit("gemm", TILED)
    assert plain.analytic_s(m=16, n=64, k=16384, dtype="bf16") > 3 * times[-1]


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 9000), n=st.integers(16, 70000), k=st.integers(16, 70000),
       field=st.sampled_from(["m", "n", "k"]), extra=st.integers(1, 5000),
       length=st.sampled_from([64.0, 1000.0, 2900.0]), cap=st.sampled_from([1.0, 3.5, 14.0]))
def test_monotone(m, n, k, field, extra, length, cap) -> None:
    fit_ = KernelFit("gemm", {**SPLIT, "split_k_len": length, "max_split_k": cap})
    shape = {"m": m, "n": n, "k": k, "dtype": "bf16"}
    assert fit_.analytic_s(**{**shape, field: shape[field] + extra}) >= fit_.analytic_s(**shape) * (1 - 1e-12) > 0


def test_round_trip_and_validation() -> None:
    back = kernel_fit_from_dict("gemm", KernelFit("gemm", SPLIT).to_dict(), file="x.yaml")
    assert back.params == pytest.approx(SPLIT, rel=1e-5)
    assert "split_k_len" not in KernelFit("gemm", TILED).to_dict()["params"]
    with pytest.raises(ConfigError, match=r"params\.max_split_k"):
        kernel_fit_from_dict("gemm", {"params": {**TILED, "split_k_len": 100.0}}, file="x.yaml")
    with pytest.raises(ConfigError, match=r"params\.split_k_len"):
        kernel_fit_from_dict("gemm", {"params": {**SPLIT, "split_k_len": 0.0}}, file="x.yaml")
    untiled = {k: v for k, v in SPLIT.items() if k in ("bandwidth_bytes_per_s", "flops_per_s", "x_half", "overhead_s",
                                                     "item_s", "sharpness", "split_k_len", "max_split_k")}
    with pytest.raises(ConfigError, match=r"params\.sm_count"):
        kernel_fit_from_dict("gemm", {"params": untiled}, file="x.yaml")

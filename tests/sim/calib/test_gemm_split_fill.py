"""Split-k's SM-fill cap (sim/calib/gemm_tiles.py, ``split_k_fill``): by hand, monotone in m, n and k,
validated, round-tripped, and off (the split-k predictions as before) without its parameter."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calib.gemm_tiles import executed_flops, k_splits, work_scale
from sim.calib.kernel_models import KernelFit, kernel_fit_from_dict
from sim.errors import ConfigError

SPLIT = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 8e14, "x_half": 0.0, "overhead_s": 3e-6, "item_s": 0.0,
         "sharpness": 3.0, "sm_count": 132.0, "tile_m": 128.0, "tile_n": 128.0, "wave_tail": 0.5, "k_half": 100.0,
         "small_max_m": 64.0, "small_tile_m": 64.0, "small_efficiency": 1.0, "mid_max_m": 256.0,
         "mid_tile_m": 64.0, "mid_efficiency": 1.0, "split_k_len": 512.0, "max_split_k": 16.0}
FILL = {**SPLIT, "split_k_fill": 2.0}


def test_the_cap_by_hand() -> None:
    # 1 tile: the cap (2 x 132 CTAs) does not bind, k / 512 and max_split_k do
    assert k_splits(FILL, 4096, tiles=1) == 8.0 and k_splits(FILL, 65536, tiles=1) == 16.0
    # 66 tiles: at most 2 x 132 / 66 = 4 chunks each; 300 tiles: no split
    assert k_splits(FILL, 65536, tiles=66) == 4.0 and k_splits(SPLIT, 65536, tiles=66) == 16.0
    assert k_splits(FILL, 65536, tiles=300) == 1.0
    # 16 tokens x n 66 x 128 (66 tiles of 64 x 128), k 8192: 4 chunks of 2048 k, 264 CTAs in two full waves
    assert executed_flops(FILL, 16, 66 * 128, 8192) == pytest.approx(2 * 132 * 64 * 128 * 2 * (2048 + 100))


def test_off_without_the_parameter() -> None:
    """Without split_k_fill the split-k form predicts as before; with a cap that never binds, the same."""
    loose = KernelFit("gemm", {**SPLIT, "split_k_fill": 1000.0})
    plain = KernelFit("gemm", SPLIT)
    for m, n, k in ((1, 64, 65536), (16, 4096, 8192), (4096, 8192, 4096), (200, 1024, 30000)):
        assert loose.analytic_s(m=m, n=n, k=k, dtype="bf16") == plain.analytic_s(m=m, n=n, k=k, dtype="bf16")
    # 64 tiles: 4.125 chunks (264 CTAs, two full waves), not 16 (1,024 CTAs: 7.76 waves, 7.88 paid)
    useful = 2 * 16 * 8192 * 65536
    assert work_scale(FILL, 16, 8192, 65536) == pytest.approx(2 * 132 * 64 * 128 * 2 * (65536 / 4.125 + 100) / useful)
    paid = 1024 / 132 + 0.5 * (8 - 1024 / 132)
    assert work_scale(SPLIT, 16, 8192, 65536) == pytest.approx(paid * 132 * 64 * 128 * 2 * (4096 + 100) / useful)


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 9000), n=st.integers(16, 70000), k=st.integers(16, 70000),
       field=st.sampled_from(["m", "n", "k"]), extra=st.integers(1, 5000),
       fill=st.sampled_from([0.05, 0.7, 2.0, 5.0]), length=st.sampled_from([64.0, 1000.0]))
def test_monotone(m, n, k, field, extra, fill, length) -> None:
    fit_ = KernelFit("gemm", {**FILL, "split_k_fill": fill, "split_k_len": length})
    shape = {"m": m, "n": n, "k": k, "dtype": "bf16"}
    assert fit_.analytic_s(**{**shape, field: shape[field] + extra}) >= fit_.analytic_s(**shape) * (1 - 1e-12) > 0


def test_round_trip_and_validation() -> None:
    back = kernel_fit_from_dict("gemm", KernelFit("gemm", FILL).to_dict(), file="x.yaml")
    assert back.params == pytest.approx(FILL, rel=1e-5)
    assert "split_k_fill" not in KernelFit("gemm", SPLIT).to_dict()["params"]
    unsplit = {k: v for k, v in FILL.items() if k not in ("split_k_len", "max_split_k")}
    with pytest.raises(ConfigError, match=r"params\.split_k_len"):
        kernel_fit_from_dict("gemm", {"params": unsplit}, file="x.yaml")
    with pytest.raises(ConfigError, match=r"params\.split_k_fill"):
        kernel_fit_from_dict("gemm", {"params": {**FILL, "split_k_fill": 0.0}}, file="x.yaml")

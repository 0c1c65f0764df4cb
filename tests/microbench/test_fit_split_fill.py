"""The fit with split-k's SM-fill cap (``split_k_fill``, sim/calib/gemm_tiles.py): it recovers the cap of
synthetic timings, keeps it only where it lowers the loss, and is asked for by a flag."""

from __future__ import annotations

import pytest

from microbench.fit import fit_params, mape
from microbench.gemm_tiles import CUBLAS_REGIMES, GemmTiles, device_gemm_tiles
from sim.calib.kernel_models import KernelFit

BASE = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 8e14, "x_half": 0.0, "overhead_s": 2.5e-6, "item_s": 0.0,
        "sharpness": 3.0, "sm_count": 132.0, "tile_m": 64.0, "tile_n": 128.0, "wave_tail": 0.8, "k_half": 150.0,
        "small_max_m": 64.0, "small_tile_m": 64.0, "small_efficiency": 1.0, "mid_max_m": 256.0,
        "mid_tile_m": 64.0, "mid_efficiency": 0.9, "split_k_len": 1200.0, "max_split_k": 16.0}
SHAPES = [(m, n, k) for n in (64, 512, 1024, 2048, 4096, 8192, 16384)
          for k in (256, 1024, 4096, 8192, 16384, 65536) for m in (1, 16, 64, 128, 256, 1024, 4096)]
TILES = GemmTiles(132, ((64, 128),), CUBLAS_REGIMES, split_k=True)


def records(params: dict) -> list[dict]:
    truth = KernelFit("gemm", params)
    return [{"kernel": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16", "time_s": truth.analytic_s(m=m, n=n, k=k)}
            for m, n, k in SHAPES]


def test_fit_recovers_the_fill_cap() -> None:
    """Short chunks capped at 1.5 CTAs per SM: the fit finds the cap, the chunk length and the cap on chunks."""
    true = {**BASE, "split_k_fill": 1.5}
    recs = records(true)
    params = fit_params("gemm", recs, GemmTiles(132, ((64, 128),), CUBLAS_REGIMES, split_k=True, split_fill=True))
    for name in ("split_k_fill", "split_k_len", "max_split_k", "flops_per_s", "bandwidth_bytes_per_s"):
        assert params[name] == pytest.approx(true[name], rel=0.03), (name, params[name])
    assert mape(params, "gemm", recs) < 0.005
    without = fit_params("gemm", recs, TILES)
    assert "split_k_fill" not in without and mape(without, "gemm", recs) > 3 * mape(params, "gemm", recs)


def test_without_a_cap_in_the_timings_the_predictions_stay() -> None:
    """Timings of split-k without a cap: the fit may keep the term only where it lowers the loss, so it
    predicts them as well as the fit without it."""
    recs = records(BASE)
    params = fit_params("gemm", recs, GemmTiles(132, ((64, 128),), CUBLAS_REGIMES, split_k=True, split_fill=True))
    assert mape(params, "gemm", recs) <= mape(fit_params("gemm", recs, TILES), "gemm", recs) + 1e-9 < 0.005


def test_the_flag() -> None:
    dev = {"name": "x", "provenance": {"sm_count": "132"}}
    assert device_gemm_tiles(dev, split_k=True, split_fill=True).term_flags() == {"split_k_len": 1.0, "split_k_fill": 1.0}
    assert not device_gemm_tiles(dev, split_fill=True).split_fill  # the cap is of split-k: nothing without it

"""The fit with the GEMM's L2-residency term (sim/calib/gemm_memory.py): it recovers the parameters of
synthetic timings, and leaves them out unless asked."""

from __future__ import annotations

import pytest

from microbench.fit import fit_params, mape
from microbench.gemm_tiles import CUBLAS_REGIMES, GemmTiles, device_gemm_tiles
from sim.calib.kernel_models import KernelFit

BASE = {"bandwidth_bytes_per_s": 7e11, "flops_per_s": 2.4e14, "x_half": 0.0, "overhead_s": 2e-6, "item_s": 0.0,
        "sharpness": 4.0, "sm_count": 142.0, "tile_m": 64.0, "tile_n": 128.0, "wave_tail": 0.4, "k_half": 60.0,
        "small_max_m": 64.0, "small_tile_m": 64.0, "small_efficiency": 1.0, "mid_max_m": 256.0,
        "mid_tile_m": 64.0, "mid_efficiency": 0.9, "split_k_len": 900.0, "max_split_k": 12.0}
SHAPES = [(m, n, k) for n in (64, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384)
          for k in (256, 1024, 2048, 4096, 8192, 16384) for m in (1, 4, 16, 64, 256, 1024, 4096)]


def records(params: dict) -> list[dict]:
    truth = KernelFit("gemm", params)
    return [{"kernel": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16", "time_s": truth.analytic_s(m=m, n=n, k=k)}
            for m, n, k in SHAPES]


def test_fit_recovers_l2_residency() -> None:
    """An L40S-like L2 (20 MB resident at 2 TB/s against 0.7 TB/s): the fit finds the DRAM's bandwidth,
    the L2's and the resident size."""
    true = {**BASE, "l2_resident_bytes": 20e6, "l2_resident_bandwidth_bytes_per_s": 2e12, "l2_resident_sharpness": 3.0}
    recs = records(true)
    tiles = GemmTiles(142, ((64, 128),), CUBLAS_REGIMES, split_k=True, l2=True)
    params = fit_params("gemm", recs, tiles)
    for name in ("bandwidth_bytes_per_s", "flops_per_s", "l2_resident_bytes", "l2_resident_bandwidth_bytes_per_s",
                 "l2_resident_sharpness", "split_k_len", "max_split_k"):
        assert params[name] == pytest.approx(true[name], rel=0.02), (name, params[name])
    assert mape(params, "gemm", recs) < 0.005
    without = fit_params("gemm", recs, GemmTiles(142, ((64, 128),), CUBLAS_REGIMES, split_k=True))
    assert "l2_resident_bytes" not in without and mape(without, "gemm", recs) > 3 * mape(params, "gemm", recs)


def test_an_l2_no_faster_than_the_dram_is_left_out() -> None:
    """Timings without an L2 step: the fit's L2 term, if it lowers the loss at all, cannot be faster than
    the DRAM, so it is left out of the parameters (it would change no prediction)."""
    recs = records(BASE)
    params = fit_params("gemm", recs, GemmTiles(142, ((64, 128),), CUBLAS_REGIMES, split_k=True, l2=True))
    if "l2_resident_bytes" in params:
        assert params["l2_resident_bandwidth_bytes_per_s"] > params["bandwidth_bytes_per_s"]
    assert mape(params, "gemm", recs) < 0.01


def test_device_tiles_flags() -> None:
    dev = {"name": "x", "provenance": {"sm_count": "142"}}
    tiles = device_gemm_tiles(dev, split_k=True, l2=True)
    assert tiles.l2 and tiles.split_k
    assert tiles.term_flags() == {"split_k_len": 1.0, "l2_resident_bytes": 1.0}
    assert device_gemm_tiles(dev).term_flags() == {}

"""The GEMM tile/wave term's givens for a fit (microbench.fit): the GPU's SM count, the candidate
tiles and the kernel regimes' bounds and tile heights (the form: sim/calib/gemm_tiles.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: cuBLAS-like Ampere/Hopper tensor-core tiles (m: tokens x n: output features)
CUBLAS_TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (128, 256), (256, 128))
#: cuBLAS-like kernel regimes (small_max_m, small_tile_m, mid_max_m, mid_tile_m): skinny kernels on
#: 64-row tiles up to 64 tokens, 64-row tiles to 256, the candidate tile above. Chosen on real A100
#: linear-layer timings by training loss and 5-fold-by-shape cross-validation inside one model
#: (benchmarks/gemm_regimes.py, benchmarks/RESULTS.md "the regimes study").
CUBLAS_REGIMES = (64, 64, 256, 64)
REGIME_GIVENS = ("small_max_m", "small_tile_m", "mid_max_m", "mid_tile_m")


@dataclass(frozen=True)
class GemmTiles:
    """The tile/wave term's givens: the GPU's SM count (datasheet) and the candidate tiles;
    ``regimes``: the kernel regimes' bounds and tile heights (None: one tile for every m)."""

    sm_count: int
    candidates: tuple[tuple[int, int], ...] = CUBLAS_TILES
    regimes: tuple[int, int, int, int] | None = None
    split_k: bool = False  # fit split-k's split_k_len and max_split_k too (sim/calib/gemm_tiles.py)


def device_gemm_tiles(device: dict | None, split_k: bool = False) -> GemmTiles | None:
    """The GEMM's tile/wave term with the kernel regimes for a measured GPU: its SM count from
    the device record's provenance (``microbench calibrate`` writes torch's multi_processor_count);
    None for a CPU or a record without it (the smooth roofline form). ``split_k``: fit the split-k
    term too (off by default: on NVIDIA's L40S tables it raises the held-out error, 19.4% -> 21.6%,
    while it lowers H100's, H200's, B200's and A100's by 2-3.4 points; benchmarks/RESULTS.md)."""
    raw = ((device or {}).get("provenance") or {}).get("sm_count")
    try:
        sms = int(str(raw))
    except ValueError:
        return None
    return GemmTiles(sm_count=sms, regimes=CUBLAS_REGIMES, split_k=split_k) if 0 < sms <= 10_000 else None


def vector_work_scale(fixed: dict, mnk: np.ndarray):
    """sim.calib.gemm_tiles.work_scale over the rows of ``mnk`` (m, n, k), as a function of the
    parameters: the given tile (and regimes) in ``fixed``, the fitted ones in its argument."""
    m, n, k = mnk.T
    sms, tm, tn = fixed["sm_count"], fixed["tile_m"], fixed["tile_n"]
    regime = None
    if "mid_max_m" in fixed:  # row regime 0, 1, 2 and its tile height
        regime = (m > fixed["small_max_m"]).astype(int) + (m > fixed["mid_max_m"])
        tm = np.array([fixed["small_tile_m"], fixed["mid_tile_m"], tm])[regime]
    tiles = np.ceil(m / tm) * np.ceil(n / tn)
    pad = sms * tm * tn / (m * n)

    def scale(p: dict) -> np.ndarray:
        full, waves, depth = tiles / sms, np.ceil(tiles / sms), 1.0
        if p.get("split_k_len", 0) > 0:
            splits = np.maximum(1.0, np.minimum(k / p["split_k_len"], p["max_split_k"]))
            split = splits > 1.0  # as executed_flops: the split rows' waves from tiles x splits
            full = np.where(split, tiles * splits / sms, full)
            waves = np.where(split, np.ceil(full - 1e-9), waves)
            depth = 1.0 / splits
        out = (full + p["wave_tail"] * (waves - full)) * pad * (depth + p["k_half"] / k)
        if regime is not None:
            out = out / np.array([p["small_efficiency"], p["mid_efficiency"], 1.0])[regime]
        return out

    return scale

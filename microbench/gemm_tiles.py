"""The GEMM tile/wave term's givens for a fit (microbench.fit): the GPU's SM count, the candidate
tiles and the kernel regimes' bounds and tile heights (the form: sim/calib/gemm_tiles.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.calib.gemm_tiles import L2_PARAMS, SPLIT_FILL_PARAMS, SPLIT_K_PARAMS
from sim.model.dtypes import DTYPE_BYTES

#: cuBLAS-like Ampere/Hopper tensor-core tiles (m: tokens x n: output features)
CUBLAS_TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (128, 256), (256, 128))
#: cuBLAS-like kernel regimes (small_max_m, small_tile_m, mid_max_m, mid_tile_m): skinny kernels on
#: 64-row tiles up to 64 tokens, 64-row tiles to 256, the candidate tile above. Chosen on real A100
#: linear-layer timings by training loss and 5-fold-by-shape cross-validation inside one model
#: (benchmarks/gemm_regimes.py, benchmarks/RESULTS.md "the regimes study").
CUBLAS_REGIMES = (64, 64, 256, 64)
REGIME_GIVENS = ("small_max_m", "small_tile_m", "mid_max_m", "mid_tile_m")
#: the optional terms a fit can add: GemmTiles' flag -> the given tile's key that asks for them, the
#: parameters fitted, their bounds and starting guesses (relative ones scale the fit's bandwidth guess)
TERMS = {"split_k": ("split_k_len", SPLIT_K_PARAMS), "split_fill": ("split_k_fill", SPLIT_FILL_PARAMS),
         "l2": ("l2_resident_bytes", L2_PARAMS)}
TERM_BOUNDS = {"split_k_len": (1.0, 1e6), "max_split_k": (1.0, 1e3), "l2_resident_bytes": (1e5, 1e10),
               "l2_resident_bandwidth_bytes_per_s": (1e9, 1e15), "l2_resident_sharpness": (0.5, 20.0),
               "split_k_fill": (0.01, 100.0)}
TERM_GUESSES = {"split_k_len": 1024.0, "max_split_k": 16.0, "l2_resident_bytes": 32e6, "l2_resident_sharpness": 2.0,
                "split_k_fill": 2.0}
TERM_RELATIVE_GUESSES = {"l2_resident_bandwidth_bytes_per_s": 2.0}


@dataclass(frozen=True)
class GemmTiles:
    """The tile/wave term's givens: the GPU's SM count (datasheet) and the candidate tiles;
    ``regimes``: the kernel regimes' bounds and tile heights (None: one tile for every m)."""

    sm_count: int
    candidates: tuple[tuple[int, int], ...] = CUBLAS_TILES
    regimes: tuple[int, int, int, int] | None = None
    split_k: bool = False  # fit split-k's split_k_len and max_split_k too (sim/calib/gemm_tiles.py)
    l2: bool = False  # fit the L2-residency term (sim/calib/gemm_memory.py)
    split_fill: bool = False  # fit split-k's SM-fill cap split_k_fill (with split_k only)

    def term_flags(self) -> dict[str, float]:
        """The given tile's keys that ask _fit_params to fit the optional terms on."""
        return {key: 1.0 for flag, (key, _) in TERMS.items() if getattr(self, flag)}


def device_gemm_tiles(device: dict | None, split_k: bool = False, l2: bool = False,
                      split_fill: bool = False) -> GemmTiles | None:
    """The GEMM's tile/wave term with the kernel regimes for a measured GPU: its SM count from
    the device record's provenance (``microbench calibrate`` writes torch's multi_processor_count);
    None for a CPU or a record without it (the smooth roofline form). ``split_k``, ``l2``, ``split_fill``:
    fit split-k, L2 residency and split-k's SM-fill cap too (measured_gemm_tiles: all three; split-k alone
    raised the held-out error on NVIDIA's L40S tables, 19.4% -> 21.6%, with L2 residency it lowers it;
    benchmarks/RESULTS.md)."""
    raw = ((device or {}).get("provenance") or {}).get("sm_count")
    try:
        sms = int(str(raw))
    except ValueError:
        return None
    ok = 0 < sms <= 10_000
    return GemmTiles(sm_count=sms, regimes=CUBLAS_REGIMES, split_k=split_k, l2=l2,
                     split_fill=split_fill and split_k) if ok else None


def measured_gemm_tiles(device: dict | None) -> GemmTiles | None:
    """The GEMM form every measured GPU is fitted with (``microbench import aiconfigurator``, ``microbench
    fit`` and ``microbench calibrate`` alike, once the SM count is known): the tile/wave term, its regimes,
    split-k, its SM-fill cap and L2 residency (the last two kept only where they lower the fit's loss)."""
    return device_gemm_tiles(device, split_k=True, l2=True, split_fill=True)


def gemm_columns(records: list[dict]) -> np.ndarray:
    """The (m, n, k, element bytes) columns of GEMM records, for the vectorized terms below."""
    return np.array([(r["m"], r["n"], r["k"], DTYPE_BYTES[r.get("dtype", "bf16")]) for r in records], dtype=float)


def _tile_rows(fixed: dict, mnk: np.ndarray):
    """Per row: its regime (None without regimes), tile height and output tiles."""
    m, n = mnk[:, 0], mnk[:, 1]
    tm, regime = fixed["tile_m"], None
    if "mid_max_m" in fixed:  # row regime 0, 1, 2 and its tile height
        regime = (m > fixed["small_max_m"]).astype(int) + (m > fixed["mid_max_m"])
        tm = np.array([fixed["small_tile_m"], fixed["mid_tile_m"], tm])[regime]
    return regime, tm, np.ceil(m / tm) * np.ceil(n / fixed["tile_n"])


def _splits(p: dict, k: np.ndarray, tiles: np.ndarray):
    if not p.get("split_k_len", 0) > 0:
        return 1.0
    cap = p["max_split_k"]
    if p.get("split_k_fill", 0) > 0:  # sim.calib.gemm_tiles.k_splits' SM-fill cap
        cap = np.minimum(cap, p["split_k_fill"] * p["sm_count"] / tiles)
    return np.maximum(1.0, np.minimum(k / p["split_k_len"], cap))


def vector_work_scale(fixed: dict, mnk: np.ndarray):
    """sim.calib.gemm_tiles.work_scale over the rows of ``mnk`` (m, n, k, ...), as a function of the
    parameters: the given tile (and regimes) in ``fixed``, the fitted ones in its argument."""
    m, n, k = mnk.T[:3]
    sms, tn = fixed["sm_count"], fixed["tile_n"]
    regime, tm, tiles = _tile_rows(fixed, mnk)
    pad = sms * tm * tn / (m * n)

    def scale(p: dict) -> np.ndarray:
        full, waves, depth = tiles / sms, np.ceil(tiles / sms), 1.0
        if p.get("split_k_len", 0) > 0:
            splits = _splits(p, k, tiles)
            split = splits > 1.0  # as executed_flops: the split rows' waves from tiles x splits
            full = np.where(split, tiles * splits / sms, full)
            waves = np.where(split, np.ceil(full - 1e-9), waves)
            depth = 1.0 / splits
        out = (full + p["wave_tail"] * (waves - full)) * pad * (depth + p["k_half"] / k)
        if regime is not None:
            out = out / np.array([p["small_efficiency"], p["mid_efficiency"], 1.0])[regime]
        return out

    return scale


def vector_memory_bytes(nbytes: np.ndarray):
    """sim.calib.gemm_memory.memory_bytes over ``nbytes``, as a function of the parameters (the L2 term
    where they carry it)."""

    def memory(p: dict) -> np.ndarray:
        bw, out = p["bandwidth_bytes_per_s"], nbytes
        if p.get("l2_resident_bytes", 0) > 0:
            hit = 1.0 / (1.0 + (nbytes / p["l2_resident_bytes"]) ** p["l2_resident_sharpness"])
            out = nbytes * (hit * bw / np.maximum(p["l2_resident_bandwidth_bytes_per_s"], bw) + 1.0 - hit)
        return out

    return memory

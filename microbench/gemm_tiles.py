"""The GEMM tile/wave term's givens for a fit (microbench.fit): the GPU's SM count, the candidate
tiles and the kernel regimes' bounds and tile heights (the form: sim/calib/gemm_tiles.py)."""

from __future__ import annotations

from dataclasses import dataclass

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


def device_gemm_tiles(device: dict | None) -> GemmTiles | None:
    """The GEMM's tile/wave term with the kernel regimes for a measured GPU: its SM count from
    the device record's provenance (``microbench calibrate`` writes torch's multi_processor_count);
    None for a CPU or a record without it (the smooth roofline form)."""
    raw = ((device or {}).get("provenance") or {}).get("sm_count")
    try:
        sms = int(str(raw))
    except ValueError:
        return None
    return GemmTiles(sm_count=sms, regimes=CUBLAS_REGIMES) if 0 < sms <= 10_000 else None

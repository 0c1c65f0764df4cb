"""Tile and wave quantisation of a GEMM (cuBLAS-like), an optional term of the fitted GEMM form.

cuBLAS splits the ``m x n`` output into ``tile_m x tile_n`` tiles (m: tokens, padded up to
whole tiles) and runs them on ``sm_count`` streaming multiprocessors in waves; a GEMM whose
tile count is just over a multiple of the SM count pays a nearly empty extra wave:

    tiles      = ceil(m / tile_m) x ceil(n / tile_n)
    waves      = ceil(tiles / sm_count)
    efficiency = tiles / (waves x sm_count)                      (wave_efficiency)

The compute term of sim.calib.kernel_models' form then runs the *executed* FLOPs,
``flops x work_scale``: the padded tiles' FLOPs, the last wave counted at ``wave_tail``
(0: the tail costs its share of a wave only; 1: a partial wave costs a full one, the pure
wave model, compute time = flops / (F x padding x wave efficiency)), and each tile's
pipeline fill and epilogue as ``k_half`` extra k-steps (time ~ k + k_half):

    waves_paid = tiles / sm_count + wave_tail x (waves - tiles / sm_count)
    work_scale = waves_paid x sm_count x tile_m x tile_n / (m x n) x (1 + k_half / k)

``sm_count`` is a GPU fact (A100: 108 SMs, NVIDIA A100 datasheet / whitepaper); the tile
shape is chosen by the fit on the training shapes among a few cuBLAS-like candidates
(microbench.fit), ``wave_tail`` and ``k_half`` are fitted. With ``sm_count`` 0 (the default,
and every calibration written before this term existed) the term is off: work_scale 1.
Every factor is non-decreasing in m, n and k, so predictions never fall as a GEMM grows.
"""

from __future__ import annotations

import math

from sim.errors import ConfigError

#: the optional parameters, their defaults (off) and allowed ranges
TILE_PARAMS = ("sm_count", "tile_m", "tile_n", "wave_tail", "k_half")
TILE_DEFAULTS = {"sm_count": 0.0, "tile_m": 0.0, "tile_n": 0.0, "wave_tail": 1.0, "k_half": 0.0}
TILE_LIMITS = {"sm_count": (1.0, 10_000.0), "tile_m": (1.0, 4096.0), "tile_n": (1.0, 4096.0),
               "wave_tail": (0.0, 1.0), "k_half": (0.0, 1e6)}
_INTEGERS = ("sm_count", "tile_m", "tile_n")


def tiles_on(params: dict) -> bool:
    """Whether ``params`` carry the tile/wave term (sm_count > 0)."""
    return params.get("sm_count", 0.0) > 0


def num_tiles(m: float, n: float, tile_m: float, tile_n: float) -> int:
    """Output tiles of an ``m x n`` GEMM: m and n padded up to whole tiles."""
    return math.ceil(m / tile_m) * math.ceil(n / tile_n)


def num_waves(tiles: int, sm_count: float) -> int:
    return math.ceil(tiles / sm_count)


def wave_efficiency(tiles: int, sm_count: float) -> float:
    """Busy share of the SM slots over all waves: 109 tiles on 108 SMs -> 109 / 216."""
    return tiles / (num_waves(tiles, sm_count) * sm_count) if tiles > 0 else 0.0


def work_scale(params: dict, m: float, n: float, k: float) -> float:
    """Executed / useful FLOPs of an ``m x n x k`` GEMM (module docstring); 1.0 with the term off."""
    if not tiles_on(params) or m <= 0 or n <= 0 or k <= 0:
        return 1.0
    sms, tm, tn = params["sm_count"], params["tile_m"], params["tile_n"]
    tiles = num_tiles(m, n, tm, tn)
    full = tiles / sms
    paid = full + params.get("wave_tail", 1.0) * (num_waves(tiles, sms) - full)
    return paid * sms * tm * tn / (m * n) * (1.0 + params.get("k_half", 0.0) / k)


def tile_params_from_dict(raw: dict, file: str, where: str) -> dict[str, float]:
    """The tile parameters of a ``params`` mapping, validated: {} when absent (the term off).

    ``sm_count``, ``tile_m`` and ``tile_n`` come together (whole numbers >= 1);
    ``wave_tail`` (0 to 1) and ``k_half`` (k-steps >= 0) are optional.
    """
    given = [name for name in TILE_PARAMS if raw.get(name) is not None]
    if not given:
        return {}
    out = dict(TILE_DEFAULTS)
    for name in given:
        v = raw[name]
        lo, hi = TILE_LIMITS[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:  # NaN fails too
            raise ConfigError(file, f"{where}.{name}", f"expected a number from {lo:g} to {hi:g}, got {v!r}")
        if name in _INTEGERS and v != int(v):
            raise ConfigError(file, f"{where}.{name}", f"expected a whole number, got {v!r}")
        out[name] = float(v)
    for name in _INTEGERS:
        if name not in given:
            raise ConfigError(file, f"{where}.{name}", "missing: the tile/wave term needs sm_count, "
                              "tile_m and tile_n together")
    return out

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

**Kernel regimes** (optional, on when ``mid_max_m`` > 0): cuBLAS runs a different kernel class
by token count, with its own tile height and efficiency. Three regimes:

    m <= small_max_m                  tile_m = small_tile_m, efficiency small_efficiency
    small_max_m < m <= mid_max_m      tile_m = mid_tile_m,   efficiency mid_efficiency
    m > mid_max_m                     tile_m = tile_m,       efficiency 1 (flops_per_s is this regime's)

and work_scale is divided by the regime's efficiency. The bounds and tile heights are given
(cuBLAS-like on Ampere and Hopper: 64 / 256 tokens, 64-row tiles below 256), the two
efficiencies fitted. Across a bound the next regime may be faster (a taller tile, a better
kernel); kernel_models.analytic_s then keeps the time at the previous regime's last token
count, so predictions still never fall as m grows.

**Split-k** (optional, on when ``split_k_len`` > 0): a GEMM with few tokens has few output tiles, and
cuBLAS splits its k across ``splits`` CTAs per tile (each a chunk of about ``split_k_len`` k, at most
``max_split_k`` chunks) so that the SMs share a long k: the tiles x splits CTAs fill the waves, each
wave k / splits deep:

    splits     = max(1, min(k / split_k_len, max_split_k))
    waves_paid = (tiles x splits) / sm_count + wave_tail x (waves - (tiles x splits) / sm_count)
    work_scale = waves_paid x sm_count x tile_m x tile_n / (m x n) x (1 / splits + k_half / k)

(splits 1: the form above). On H100 SXM's vLLM tables (16 tokens, n 32) the time grows with k to about
3,000 and then stays at 6 us to k = 16,384; the split-k form follows it where the unsplit one, paying
a whole serial k per tile, is three times too slow at k = 65,536. Still non-decreasing in k: k /
splits is split_k_len while the splits are not capped, and the waves grow with the splits. Fitted
with L2 residency (sim/calib/gemm_memory.py) in the imported calibrations: alone it raised the L40S's
held-out error, whose 96 MB L2 serves the tables' small GEMMs (benchmarks/RESULTS.md).

**SM-fill cap of split-k** (optional, on with split-k when ``split_k_fill`` > 0): cuBLAS splits k to fill
the SMs, so a GEMM with many tiles splits less: at most ``split_k_fill`` CTAs per SM,

    splits     = max(1, min(k / split_k_len, max_split_k, split_k_fill x sm_count / tiles))

With full waves the cap changes little (the same work in fewer, deeper CTAs); what it changes is the
partial last wave and the per-CTA ``k_half``. Fitted by the import and kept per file where it lowers the
fit's loss (benchmarks/RESULTS.md: A100 SXM under vLLM, 10.6% -> 10.1% held out by shape).
"""

from __future__ import annotations

import math

from sim.errors import ConfigError

#: the optional parameters, their defaults (off) and allowed ranges
TILE_PARAMS = ("sm_count", "tile_m", "tile_n", "wave_tail", "k_half")
TILE_DEFAULTS = {"sm_count": 0.0, "tile_m": 0.0, "tile_n": 0.0, "wave_tail": 1.0, "k_half": 0.0}
TILE_LIMITS = {"sm_count": (1.0, 10_000.0), "tile_m": (1.0, 4096.0), "tile_n": (1.0, 4096.0),
               "wave_tail": (0.0, 1.0), "k_half": (0.0, 1e6)}
#: the optional kernel regimes (module docstring): all six or none, on top of the tile term
REGIME_PARAMS = ("small_max_m", "small_tile_m", "small_efficiency", "mid_max_m", "mid_tile_m", "mid_efficiency")
REGIME_LIMITS = {"small_max_m": (1.0, 1e6), "small_tile_m": (1.0, 4096.0), "small_efficiency": (0.01, 100.0),
                 "mid_max_m": (1.0, 1e6), "mid_tile_m": (1.0, 4096.0), "mid_efficiency": (0.01, 100.0)}
SPLIT_K_PARAMS = ("split_k_len", "max_split_k")
SPLIT_K_LIMITS = {"split_k_len": (1.0, 1e9), "max_split_k": (1.0, 1e6)}
#: the optional SM-fill cap of split-k (module docstring): on top of split-k
SPLIT_FILL_PARAMS = ("split_k_fill",)
SPLIT_FILL_LIMITS = {"split_k_fill": (1e-3, 1e3)}
#: the optional L2-residency term of the memory side (sim/calib/gemm_memory.py)
L2_PARAMS = ("l2_resident_bytes", "l2_resident_bandwidth_bytes_per_s", "l2_resident_sharpness")
L2_LIMITS = {"l2_resident_bytes": (1.0, 1e12), "l2_resident_bandwidth_bytes_per_s": (1.0, 1e16), "l2_resident_sharpness": (0.1, 1e3)}
_INTEGERS = ("sm_count", "tile_m", "tile_n", "small_max_m", "small_tile_m", "mid_max_m", "mid_tile_m")


def tiles_on(params: dict) -> bool:
    """Whether ``params`` carry the tile/wave term (sm_count > 0)."""
    return params.get("sm_count", 0.0) > 0


def regimes_on(params: dict) -> bool:
    """Whether ``params`` carry the kernel regimes (mid_max_m > 0; the tile term on)."""
    return params.get("mid_max_m", 0.0) > 0 and tiles_on(params)


def split_k_on(params: dict) -> bool:
    """Whether ``params`` carry the split-k term (split_k_len > 0; the tile term on)."""
    return params.get("split_k_len", 0.0) > 0 and tiles_on(params)


def split_fill_on(params: dict) -> bool:
    """Whether ``params`` cap split-k by the SMs' fill (split_k_fill > 0; split-k on)."""
    return params.get("split_k_fill", 0.0) > 0 and split_k_on(params)


def l2_on(params: dict) -> bool:
    """Whether ``params`` carry the GEMM's L2-residency term (l2_resident_bytes > 0)."""
    return params.get("l2_resident_bytes", 0.0) > 0


def k_splits(params: dict, k: float, tiles: float = 0.0) -> float:
    """The k chunks of each of ``tiles`` output tiles (module docstring); 1 with split-k off."""
    if not split_k_on(params):
        return 1.0
    cap = params["max_split_k"]
    if split_fill_on(params) and tiles > 0:  # no more CTAs than split_k_fill per SM
        cap = min(cap, params["split_k_fill"] * params["sm_count"] / tiles)
    return max(1.0, min(k / params["split_k_len"], cap))


def regime(params: dict, m: float) -> tuple[float, float]:
    """(tile_m, efficiency) of the kernel an ``m``-token GEMM runs: the tile term's own tile at
    efficiency 1 without regimes or past ``mid_max_m``."""
    if regimes_on(params):
        if m <= params["small_max_m"]:
            return params["small_tile_m"], params["small_efficiency"]
        if m <= params["mid_max_m"]:
            return params["mid_tile_m"], params["mid_efficiency"]
    return params["tile_m"], 1.0


def previous_regime_end(params: dict, m: float) -> float:
    """The largest token count of the regime before ``m``'s (0: ``m`` is in the first, or no regimes)."""
    if not regimes_on(params) or m <= params["small_max_m"]:
        return 0.0
    return params["small_max_m"] if m <= params["mid_max_m"] else params["mid_max_m"]


def num_tiles(m: float, n: float, tile_m: float, tile_n: float) -> int:
    """Output tiles of an ``m x n`` GEMM: m and n padded up to whole tiles."""
    return math.ceil(m / tile_m) * math.ceil(n / tile_n)


def num_waves(tiles: int, sm_count: float) -> int:
    return math.ceil(tiles / sm_count)


def wave_efficiency(tiles: int, sm_count: float) -> float:
    """Busy share of the SM slots over all waves: 109 tiles on 108 SMs -> 109 / 216."""
    return tiles / (num_waves(tiles, sm_count) * sm_count) if tiles > 0 else 0.0


def executed_flops(params: dict, m: float, n: float, k: float) -> float:
    """The FLOPs an ``m x n x k`` GEMM is charged with the term on: the waves paid, each of
    ``sm_count`` tiles of 2 x tile_m x tile_n x (k + k_half), over the regime's efficiency.
    A step function of m (constant within a tile row and a wave), never a rounding below it."""
    sms, tn = params["sm_count"], params["tile_n"]
    tm, eff = regime(params, m)
    tiles = num_tiles(m, n, tm, tn)
    splits = k_splits(params, k, tiles)
    if splits > 1.0:  # tiles x splits CTAs, each k / splits deep
        total = tiles * splits
        full = total / sms
        paid = full + params.get("wave_tail", 1.0) * (math.ceil(full - 1e-9) - full)
        return paid * sms * tm * tn * 2.0 * (k / splits + params.get("k_half", 0.0)) / eff
    full = tiles / sms
    paid = full + params.get("wave_tail", 1.0) * (num_waves(tiles, sms) - full)
    return paid * sms * tm * tn * 2.0 * (k + params.get("k_half", 0.0)) / eff


def work_scale(params: dict, m: float, n: float, k: float) -> float:
    """Executed / useful FLOPs of an ``m x n x k`` GEMM (module docstring); 1.0 with the term off."""
    if not tiles_on(params) or m <= 0 or n <= 0 or k <= 0:
        return 1.0
    return executed_flops(params, m, n, k) / (2.0 * m * n * k)


def _checked(v, limits: tuple[float, float], name: str, file: str, where: str) -> float:
    """One parameter's value: a number within ``limits`` (a whole one for the counts and sizes)."""
    lo, hi = limits
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:  # NaN fails too
        raise ConfigError(file, f"{where}.{name}", f"expected a number from {lo:g} to {hi:g}, got {v!r}")
    if name in _INTEGERS and v != int(v):
        raise ConfigError(file, f"{where}.{name}", f"expected a whole number, got {v!r}")
    return float(v)


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
        out[name] = _checked(raw[name], TILE_LIMITS[name], name, file, where)
    for name in ("sm_count", "tile_m", "tile_n"):
        if name not in given:
            raise ConfigError(file, f"{where}.{name}", "missing: the tile/wave term needs sm_count, "
                              "tile_m and tile_n together")
    return out


def gemm_param_names(params: dict) -> tuple[str, ...]:
    """The optional GEMM parameters ``params`` carry (written with the fit)."""
    return ((TILE_PARAMS if tiles_on(params) else ()) + (REGIME_PARAMS if regimes_on(params) else ())
            + (SPLIT_K_PARAMS if split_k_on(params) else ()) + (SPLIT_FILL_PARAMS if split_fill_on(params) else ())
            + (L2_PARAMS if l2_on(params) else ()))


def regime_and_split_params_from_dict(raw: dict, file: str, where: str) -> dict[str, float]:
    """The kernel regimes', split-k's and L2 residency's parameters of a ``params`` mapping, validated
    ({} when absent; the L2 term needs no tiles)."""
    out = regime_params_from_dict(raw, file, where) | split_k_params_from_dict(raw, file, where)
    if raw.get("split_k_fill") is not None:
        if "split_k_len" not in out:
            raise ConfigError(file, f"{where}.split_k_len", "missing: split_k_fill caps split-k (split_k_len, "
                              "max_split_k), which it needs")
        out["split_k_fill"] = _checked(raw["split_k_fill"], SPLIT_FILL_LIMITS["split_k_fill"], "split_k_fill", file, where)
    l2 = [name for name in L2_PARAMS if raw.get(name) is not None]
    for name in L2_PARAMS if l2 else ():
        if name not in l2:
            raise ConfigError(file, f"{where}.{name}", "missing: the L2-residency term needs " + ", ".join(L2_PARAMS)
                              + " together")
        out[name] = _checked(raw[name], L2_LIMITS[name], name, file, where)
    return out


def _group_on_tiles(raw: dict, names: tuple, limits: dict, file: str, where: str, missing: str,
                    missing_tiles: str) -> dict[str, float]:
    """A term's parameters ``names`` of a ``params`` mapping, validated: {} when none is given, else
    all of them (``missing``: the error when one is not), on top of the tile/wave term
    (``missing_tiles``: the error without it)."""
    given = [name for name in names if raw.get(name) is not None]
    if not given:
        return {}
    out = {}
    for name in names:
        if name not in given:
            raise ConfigError(file, f"{where}.{name}", missing)
        out[name] = _checked(raw[name], limits[name], name, file, where)
    if raw.get("sm_count") is None:
        raise ConfigError(file, f"{where}.sm_count", missing_tiles)
    return out


def split_k_params_from_dict(raw: dict, file: str, where: str) -> dict[str, float]:
    """The split-k parameters of a ``params`` mapping, validated: {} when absent; both together, on
    top of the tile term."""
    return _group_on_tiles(raw, SPLIT_K_PARAMS, SPLIT_K_LIMITS, file, where,
                           "missing: split-k needs split_k_len and max_split_k together",
                           "missing: split-k needs the tile/wave term (sm_count, tile_m, tile_n)")


def regime_params_from_dict(raw: dict, file: str, where: str) -> dict[str, float]:
    """The kernel-regime parameters of a ``params`` mapping, validated: {} when absent.

    All six come together, on top of the tile term; ``small_max_m`` < ``mid_max_m``.
    """
    out = _group_on_tiles(raw, REGIME_PARAMS, REGIME_LIMITS, file, where,
                          "missing: the kernel regimes need " + ", ".join(REGIME_PARAMS) + " together",
                          "missing: the kernel regimes need the tile/wave term (sm_count, tile_m, tile_n)")
    if not out:
        return out
    if out["small_max_m"] >= out["mid_max_m"]:
        raise ConfigError(file, f"{where}.mid_max_m", f"must be above small_max_m ({out['small_max_m']:g}), "
                          f"got {out['mid_max_m']:g}")
    return out

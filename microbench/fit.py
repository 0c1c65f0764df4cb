"""Fit kernel time models to measurements, cross-validate them by shape, build a Calibration.

``fit(records) -> Calibration`` fits every kernel present (sim.calib.kernel_models' one model form;
parameters physical: bytes/s, FLOP/s, tokens, seconds), reports each fit's error by k-fold
cross-validation *by shape* (all timings of one shape, i.e. all fields but the kernel's axis, held out
together and predicted by the analytic form alone, as an unseen model's), and keeps the measurements as
the interpolation grid.

With ``tiles=GemmTiles(sm_count, candidates)`` (microbench/gemm_tiles.py) the GEMM's form gains
cuBLAS's tile and wave quantisation (sim/calib/gemm_tiles.py): the SM count given (a datasheet fact),
the tile chosen among the candidates by the lowest training loss, the wave-tail weight and per-tile k
overhead fitted; ``regimes=CUBLAS_REGIMES`` adds the kernel regimes (tile height and efficiency by
token count, their two efficiencies fitted), and the flags split-k, its SM-fill cap and L2 residency.

Fitting minimizes a robust (soft-L1) loss on log(predicted / measured): a 10 us and a 10 ms timing weigh
alike, and a few noisy timings do not pull the fit.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np

from microbench.attention_fit import describe_split, fit_decode_split, fit_prefill
from microbench.gemm_tiles import (REGIME_GIVENS, TERM_BOUNDS, TERM_GUESSES, TERM_RELATIVE_GUESSES, TERMS, GemmTiles,
                                   gemm_columns, vector_memory_bytes, vector_work_scale)
from microbench.peaks import fit_precision
from sim.calib.gemm_memory import cold_l2 as gemm_cold_l2
from sim.calib.calibration import Calibration, CalibrationSource
from sim.errors import ConfigError
from sim.calib.kernel_models import KERNELS, GridRow, KernelFit, analytic_s, features, grid_key

#: fit_params fits split-k's fill cap, then L2 residency, each from the best fit so far (the cap from these, -1:
FILL_STARTS = (1.5, 3.0, -1.0)  # every parameter from the guesses; the loss jumps at whole waves), kept if better
MAX_GRID_POINTS, F_SCALE = 48, 0.05  # grid points per shape (log-spaced); the soft-L1 scale of the log residuals
# (lower, upper) bounds of the free parameters
BOUNDS = {"bandwidth_bytes_per_s": (1e6, 1e15), "flops_per_s": (1e6, 1e17), "x_half": (1e-3, 1e5),
          "overhead_s": (1e-9, 1.0), "item_s": (1e-10, 1.0), "sharpness": (1.0, 30.0),
          "wave_tail": (1e-4, 1.0), "k_half": (1e-3, 1e5), "small_efficiency": (0.1, 2.0),
          "mid_efficiency": (0.1, 2.0),  # a regime's kernels: at most twice the large-m ones' FLOP rate
          **TERM_BOUNDS}  # split-k's, its fill cap's and L2 residency's (microbench/gemm_tiles.py)


def _arrays(kernel: str, records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    feats = np.array([features(kernel, r) for r in records], dtype=float)  # bytes, flops, items, x
    return feats, np.array([r["time_s"] for r in records], dtype=float)


def _free_params(feats: np.ndarray) -> list[str]:
    free = ["bandwidth_bytes_per_s", "overhead_s"]
    if (feats[:, 1] > 0).any():
        free += ["flops_per_s", "sharpness"]
        if np.ptp(feats[:, 3]) > 0:
            free.append("x_half")
    if (feats[:, 2] > 0).any():
        free.append("item_s")
    return free


def _predict(params: dict, kernel: str, records: list[dict]) -> np.ndarray:
    return np.array([analytic_s(params, kernel, r) for r in records])


def _vector_model(free: list[str], fixed: dict, feats: np.ndarray, mnk: np.ndarray | None = None):
    """A vectorized form over ``feats`` for a log-parameter vector (the same form as
    kernel_models.analytic_s; ``mnk``: the GEMM's m, n, k columns when the tile term is on)."""
    nbytes, flops, items, x = feats.T
    scale = vector_work_scale(fixed, mnk) if mnk is not None else None
    memory = vector_memory_bytes(nbytes) if mnk is not None else None

    def model(logp: np.ndarray) -> np.ndarray:
        p = {**fixed, **dict(zip(free, np.exp(logp)))}
        mem = (memory(p) if memory is not None else nbytes) / p["bandwidth_bytes_per_s"]
        eff = np.where(x > 0, x / (x + p["x_half"]), 1e-12)
        work = flops * scale(p) if scale is not None else flops
        comp = np.where(flops > 0, work / (p["flops_per_s"] * eff), 0.0)
        hi, lo = np.maximum(mem, comp), np.minimum(mem, comp)
        s = p["sharpness"]
        if math.isfinite(s):
            hi = hi * (1.0 + (lo / np.maximum(hi, 1e-30)) ** s) ** (1.0 / s)
        return p["overhead_s"] + p["item_s"] * items + hi

    return model


def fit_params(kernel: str, records: list[dict], tiles: GemmTiles | None = None) -> dict[str, float]:
    """Least-squares parameters of ``kernel``'s model form on ``records`` (at least 2).

    ``tiles`` (GEMMs with FLOPs only): fit each candidate tile and keep the one of least loss (with
    ``tiles.regimes``, the regimes' efficiencies too); for attention, its terms (microbench.attention_fit).
    """
    if kernel in ("decode_attention", "prefill_attention") and tiles is not None:  # a GPU's: attention_fit
        return (fit_decode_split if kernel == "decode_attention" else fit_prefill)(records, BOUNDS, F_SCALE)[0]
    if tiles is None or not KERNELS[kernel].tiled:
        return _fit_params(kernel, records)[0]
    best = None
    for tm, tn in tiles.candidates:
        fixed = {"sm_count": float(tiles.sm_count), "tile_m": float(tm), "tile_n": float(tn)}
        if tiles.regimes is not None:
            fixed.update(zip(REGIME_GIVENS, map(float, tiles.regimes)))
        fixed.update(tiles.term_flags())  # flags here: the optional terms fitted (_fit_params)
        nested = [key for key in ("split_k_fill", "l2_resident_bytes") if key in fixed]
        given = {k: v for k, v in fixed.items() if k not in nested}
        fit_ = _fit_params(kernel, records, given)
        for key, start in [(key, s) for key in nested for s in (FILL_STARTS if key == "split_k_fill" else (0.0,))]:
            trial = _fit_params(kernel, records, {**given, key: 1.0}, start=None if start < 0 else
                                {**fit_[0], **({key: start} if start else {})})
            given, fit_ = ({**given, key: 1.0}, trial) if trial[1] < fit_[1] else (given, fit_)
        best = fit_ if best is None or fit_[1] < best[1] else best
    p = best[0]  # an L2 no faster than the DRAM changes nothing: left out
    return gemm_cold_l2(p) if p.get("l2_resident_bandwidth_bytes_per_s", 0) <= p["bandwidth_bytes_per_s"] else p


def _fit_params(kernel: str, records: list[dict], tile: dict | None = None, start: dict | None = None) -> tuple[dict, float]:
    """(parameters, robust loss); ``tile``: the tile/wave term's givens; ``start``: starting values (else guesses)."""
    from scipy.optimize import least_squares  # noqa: PLC0415  (scipy: only when fitting)

    feats, t = _arrays(kernel, records)
    free = _free_params(feats)
    fixed = {"flops_per_s": math.inf, "x_half": 0.0, "item_s": 0.0, "sharpness": math.inf}
    mnk = None
    if tile is not None and "flops_per_s" in free:
        # padding m to whole tiles replaces x_half's smooth under-fill (kept 0: monotone in m)
        free = [p for p in free if p != "x_half"] + ["wave_tail", "k_half"]
        if "mid_max_m" in tile:
            free += ["small_efficiency", "mid_efficiency"]
        fixed.update(tile)
        for key, names in TERMS.values():
            if key in tile:
                free += list(names)
                del fixed[key]
        mnk = gemm_columns(records)
    big = feats[:, 0] >= np.quantile(feats[:, 0], 0.75)
    guess = {"bandwidth_bytes_per_s": float(np.median(feats[big, 0] / t[big])),
             "flops_per_s": float(np.max(feats[:, 1] / t)) * 1.5 or 1e12, "x_half": 16.0,
             "overhead_s": float(np.min(t)) * 0.5, "item_s": float(np.min(t)) * 0.1, "sharpness": 4.0,
             "wave_tail": 0.5, "k_half": 64.0, "small_efficiency": 1.0, "mid_efficiency": 1.0, **TERM_GUESSES}
    guess.update({k: v for k, v in (start or {}).items() if k in guess and math.isfinite(v)})
    guess.update({k: v * guess["bandwidth_bytes_per_s"] for k, v in TERM_RELATIVE_GUESSES.items()})
    lo, hi = (np.log([BOUNDS[p][i] for p in free]) for i in (0, 1))
    x0 = np.clip(np.log([max(guess[p], 1e-30) for p in free]), lo + 1e-9, hi - 1e-9)
    model = _vector_model(free, fixed, feats, mnk)
    log_t = np.log(t)
    res = least_squares(lambda lp: np.log(model(lp)) - log_t, x0, bounds=(lo, hi), loss="soft_l1", f_scale=F_SCALE)
    return {name: float(v) for name, v in {**fixed, **dict(zip(free, np.exp(res.x)))}.items()}, float(res.cost)


def mape(params: dict, kernel: str, records: list[dict]) -> float:
    t = np.array([r["time_s"] for r in records], dtype=float)
    return float(np.mean(np.abs(_predict(params, kernel, records) / t - 1.0)))


def cross_validate(kernel: str, records: list[dict], folds: int = 5, seed: int = 0,
                   tiles: GemmTiles | None = None) -> tuple[float | None, int]:
    """(MAPE of the analytic form on held-out shapes, folds used).

    Folds hold out whole shapes; a kernel measured on one shape only (a copy over sizes)
    holds out single records instead. (None, 0) with fewer than 3 records.
    """
    by_shape = defaultdict(list)
    for r in records:
        by_shape[grid_key(kernel, r)].append(r)
    if len(by_shape) < 2:
        by_shape = {(i,): [r] for i, r in enumerate(records)}
        if len(records) < 3:
            return None, 0
    keys = sorted(by_shape, key=repr)
    folds = min(folds, len(keys))
    if folds < 2:
        return None, 0
    order = np.random.default_rng(seed).permutation(len(keys))
    errors = []
    for f in range(folds):
        test_keys = {keys[i] for i in order[f::folds]}
        train = [r for k in keys if k not in test_keys for r in by_shape[k]]
        test = [r for k in test_keys for r in by_shape[k]]
        params = fit_params(kernel, train, tiles)  # the tile choice too is made without the fold
        t = np.array([r["time_s"] for r in test], dtype=float)
        errors.extend(np.abs(_predict(params, kernel, test) / t - 1.0))
    return float(np.mean(errors)), folds


def build_grid(kernel: str, records: list[dict], max_points: int = MAX_GRID_POINTS) -> tuple[GridRow, ...]:
    """Per shape: median time at each axis value, at most ``max_points`` log-spaced values kept,
    as a running maximum along the axis (more work never predicts less time)."""
    axis = KERNELS[kernel].axis
    cells: dict[tuple, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        cells[grid_key(kernel, r)][float(r[axis])].append(r["time_s"])
    rows = []
    for key in sorted(cells, key=repr):
        xs = sorted(v for v in cells[key] if v > 0)
        if len(xs) < 2:
            continue
        if len(xs) > max_points:
            idx = np.unique(np.round(np.geomspace(1, len(xs), max_points)).astype(int) - 1)
            xs = [xs[i] for i in idx]
        times = np.maximum.accumulate([float(np.median(cells[key][x])) for x in xs])
        rows.append(GridRow(key, tuple(xs), tuple(float(t) for t in times)))
    return tuple(rows)


def fit_kernel(kernel: str, records: list[dict], *, folds: int = 5, grid: bool = True,
               tiles: GemmTiles | None = None) -> KernelFit:
    """Fit, cross-validate and grid one kernel's records (``tiles``: the GEMM tile/wave term)."""
    if len(records) < 2:
        raise ConfigError("<measurements>", kernel, f"need at least 2 records to fit, got {len(records)}")
    params = fit_params(kernel, records, tiles)
    cv, used = cross_validate(kernel, records, folds, tiles=tiles)
    return KernelFit(kernel, params, cv_mape=cv, train_mape=mape(params, kernel, records),
                     num_records=len(records), num_shapes=len({grid_key(kernel, r) for r in records}),
                     cv_folds=used, grid=build_grid(kernel, records) if grid else ())


def _scalar(fits: dict[str, KernelFit], kernel: str, param: str, default: float | None) -> float | None:
    fit = fits.get(kernel)
    v = fit.params[param] if fit is not None else None
    return v if v is not None and math.isfinite(v) else default


def fit(records: list[dict], *, device: dict | None = None, base: Calibration | None = None,
        name: str | None = None, folds: int = 5, grid: bool = True, progress=None,
        gemm_tiles: GemmTiles | None = None) -> Calibration:
    """A measured Calibration from measurement records (see microbench.records).

    The scalar keys (bandwidth, FLOP/s, PCIe, launch and step overhead) come from the fits
    (copy_d2d, gemm, copy_h2d, copy_d2d's overhead, step), falling back to ``base``; the
    device name and memory come from ``device`` (a JSONL device record) or ``base``.
    ``progress``: optional callable(kernel) before each kernel is fitted; ``gemm_tiles``: fit
    the GEMM with the tile/wave term (the SM count and candidate tiles).
    ``gemm_peak`` and ``weight_only_gemv`` records become the ``compute_peaks`` and ``dequant``
    sections (microbench.peaks.fit_precision: achieved peaks, bf16 always written).
    """
    by_kernel: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_kernel[r["kernel"]].append(r)
    fits = {}
    for kernel in (k for k in KERNELS if k in by_kernel):
        if progress is not None:
            progress(kernel)
        fits[kernel] = fit_kernel(kernel, by_kernel[kernel], folds=folds, grid=grid,
                                  tiles=gemm_tiles if kernel in ("gemm", "decode_attention", "prefill_attention") else None)
    device = device or {}
    pinned = [r for r in by_kernel.get("copy_h2d", []) if r.get("pinned")]
    pcie = fit_params("copy_h2d", pinned)["bandwidth_bytes_per_s"] if len(pinned) >= 2 else None
    need = {
        "memory_bytes": device.get("memory_bytes"),
        "hbm_bandwidth_bytes_per_s": _scalar(fits, "copy_d2d", "bandwidth_bytes_per_s",
                                             _scalar(fits, "gemm", "bandwidth_bytes_per_s", None)),
        "peak_flops": _scalar(fits, "gemm", "flops_per_s", None),
        "pcie_bandwidth_bytes_per_s": pcie or _scalar(fits, "copy_h2d", "bandwidth_bytes_per_s", None),
        "kernel_launch_s": _scalar(fits, "copy_d2d", "overhead_s", _scalar(fits, "gemm", "overhead_s", None)),
        "step_overhead_s": _scalar(fits, "step", "overhead_s", None),
    }
    for key, value in need.items():
        if value is None:
            if base is None:
                raise ConfigError("<measurements>", key, "not measured and no device record; pass a base "
                                  "calibration (microbench fit --base NAME) to take it from")
            need[key] = getattr(base, key) * (base.bandwidth_efficiency if key == "hbm_bandwidth_bytes_per_s" else 1)
    provenance = {**(base.provenance if base and not device else {}), **(device.get("provenance") or {})}
    provenance = {k: str(v) for k, v in provenance.items()}
    provenance["fit"] = ", ".join(f"{k}: cv MAPE {f.cv_mape:.1%}" if f.cv_mape is not None else f"{k}: no cv"
                                  for k, f in fits.items())
    gemm_half = _scalar(fits, "gemm", "x_half", base.compute_m_half_tokens if base else 0.0)
    cal_name = name or device.get("name") or (base.name + "-measured" if base else "measured")
    precision, lines = fit_precision(records, peak_flops=need["peak_flops"], file=cal_name)  # microbench.peaks
    provenance.update(lines)
    cal = Calibration(
        name=cal_name,
        source=CalibrationSource.MEASURED,
        gpu_name=device.get("gpu_name") or (base.gpu_name if base else "unknown"),
        memory_bytes=int(need["memory_bytes"]), hbm_bandwidth_bytes_per_s=need["hbm_bandwidth_bytes_per_s"],
        bandwidth_efficiency=1.0, peak_flops=need["peak_flops"], compute_eff_max=1.0,
        compute_m_half_tokens=gemm_half, pcie_bandwidth_bytes_per_s=need["pcie_bandwidth_bytes_per_s"],
        kernel_launch_s=need["kernel_launch_s"], step_overhead_s=need["step_overhead_s"],
        provenance=provenance, schema=2, kernels=fits, precision=precision)
    steps = by_kernel.get("forward", [])
    if steps and "gemm" in fits:  # the kernel sum needs a fitted GEMM (else the datasheet roofline applies)
        if progress is not None:
            progress("forward")
        from microbench.compose import fit_composition  # noqa: PLC0415

        synchronous = (device.get("provenance") or {}).get("cuda") == "none"  # measured on a CPU
        comp = fit_composition(steps, cal, folds=folds, forms=("sum",) if synchronous else ("sum", "overlap"))
        cv = "no cv" if comp.cv_mape is None else f"cv MAPE {comp.cv_mape:.1%}"
        provenance["fit"] += f", composition: kernel-sum MAPE {comp.raw_mape:.1%}, corrected {cv}"
        if comp.idle_s:
            provenance["fit"] += f", after {comp.idle_s * 1e3:.0f} ms idle x{comp.idle_scale:.3f}"
        cal = dataclasses.replace(cal, composition=comp, provenance=provenance)
    return cal


def describe(fit_: KernelFit) -> str:
    """One line of physical parameters: GB/s, TFLOP/s, tokens, microseconds, and the errors."""
    p = fit_.params
    parts = [f"{fit_.kernel:<18}", f"{p['bandwidth_bytes_per_s'] / 1e9:9.1f} GB/s"]
    if math.isfinite(p["flops_per_s"]):
        parts.append(f"{p['flops_per_s'] / 1e12:8.2f} TFLOP/s x_half {p['x_half']:7.1f} p {p['sharpness']:4.1f}")
        if p.get("sm_count", 0) > 0:
            parts.append(f"tile {p['tile_m']:.0f}x{p['tile_n']:.0f} on {p['sm_count']:.0f} SMs, wave tail "
                         f"{p['wave_tail']:.2f}, k_half {p['k_half']:.0f}")
            if p.get("mid_max_m", 0) > 0:
                parts.append(f"regimes <= {p['small_max_m']:.0f} / <= {p['mid_max_m']:.0f} tokens at "
                             f"{p['small_efficiency']:.2f} / {p['mid_efficiency']:.2f}")
            if p.get("split_k_len", 0) > 0:
                parts.append(f"split-k: chunks of {p['split_k_len']:.0f} k, up to {p['max_split_k']:.1f}"
                             + (f", {p['split_k_fill']:.2f} CTAs per SM" if p.get("split_k_fill", 0) > 0 else ""))
        if p.get("l2_resident_bytes", 0) > 0:
            parts.append(f"L2: {p['l2_resident_bytes'] / 1e6:.0f} MB at {p['l2_resident_bandwidth_bytes_per_s'] / 1e9:.0f} GB/s")
    parts += [describe_split(p)] if describe_split(p) else []
    parts.append(f"overhead {p['overhead_s'] * 1e6:8.1f} us")
    if p["item_s"] > 0:
        parts.append(f"per item {p['item_s'] * 1e6:7.1f} us")
    cv = "-" if fit_.cv_mape is None else f"{fit_.cv_mape:.1%}"
    parts.append(f"cv MAPE {cv} ({fit_.cv_folds} folds, {fit_.num_shapes} shapes, {fit_.num_records} records)")
    return "  ".join(parts)

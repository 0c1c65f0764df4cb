"""The composition fit: how the kernel models compose into a measured engine step.

``fit_composition(forward_records, calibration) -> Composition`` (sim/calib/composition.py):
the kernel terms of each whole step measured by ``microbench`` (``kernel: forward``) are
predicted from the calibration's fitted kernels (sim.cost.fitted, no composition), and
scales, per-layer and per-step terms are fitted to the measured times in the ``sum`` and,
for asynchronous devices, the ``overlap`` form, each cross-validated k-fold over steps;
steps timed after idleness fit the after-idle factor. ``microbench.fit.fit`` calls it
once the kernels are fitted.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sim.calib.calibration import Calibration
from sim.calib.composition import ATTENTION_PARTS, Composition, forward_batch, forward_model


def kernel_parts(cal: Calibration, rec: dict) -> dict[str, float]:
    """The kernel terms (sim.cost.fitted.FittedCost.step_parts, no composition) of a forward record."""
    from sim.cost.fitted import build_fitted_cost  # noqa: PLC0415
    from sim.cost.shape import BatchShape  # noqa: PLC0415
    from sim.model.dtypes import DTYPE_BYTES, KVDtype  # noqa: PLC0415

    cost = build_fitted_cost(forward_model(rec), dataclasses.replace(cal, composition=None),
                             KVDtype(rec["dtype"]), DTYPE_BYTES[rec["dtype"]])
    return cost.step_parts(BatchShape(**forward_batch(rec)))


def kernel_sum_s(cal: Calibration, rec: dict) -> float:
    """The composed kernel models' time (no composition) of a forward record."""
    return sum(kernel_parts(cal, rec).values())


def _solve_sum(cols: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative coefficients of ``cols`` [records, terms] minimizing the relative error;
    a term that is zero on every record keeps the first term's coefficient (the main scale)."""
    from scipy.optimize import nnls  # noqa: PLC0415

    used = np.flatnonzero(np.any(cols != 0, axis=0))
    x = np.zeros(cols.shape[1])
    x[used], _ = nnls(cols[:, used] / t[:, None], np.ones_like(t))
    return _fill_scales(x, used)


def _fill_scales(x: np.ndarray, used) -> np.ndarray:
    x[0] = max(x[0], 1e-6)
    for j in (1, 2):  # the attention scales
        if j not in used or x[j] <= 0:
            x[j] = x[0]
    return x


def _predict_overlap(x: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """cols [kernels but attention, decode attention, prefill attention, layers, 1]."""
    return x[4] * cols[:, 4] + np.maximum(cols[:, :3] @ x[:3], x[3] * cols[:, 3])


def _solve_overlap(cols: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Non-negative (scales, per_layer_s, per_step_s) of the overlap form, least relative error."""
    from scipy.optimize import least_squares  # noqa: PLC0415

    used = np.flatnonzero(np.any(cols != 0, axis=0))
    start = _solve_sum(cols, t)
    best = None
    for per_layer in (start[3], 0.9 * float(np.min(t / np.maximum(cols[:, 3], 1.0)))):  # kernel- or launch-bound
        x0 = np.maximum(np.r_[start[:3], per_layer, start[4]], 1e-12)
        res = least_squares(lambda x: _predict_overlap(x, cols) / t - 1.0, x0, bounds=(0.0, np.inf))
        if best is None or res.cost < best.cost:
            best = res
    return _fill_scales(best.x.copy(), used)


def _predict_sum(x: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return cols @ x


#: ``overlap`` replaces ``sum`` only when its held-out error is this much lower (absolute)
OVERLAP_MARGIN = 0.005


def fit_composition(records: list[dict], cal: Calibration, folds: int = 5, seed: int = 0,
                    forms: tuple[str, ...] = ("sum", "overlap")) -> Composition:
    """The correction from ``cal``'s kernel terms to the measured steps of ``records``
    (``kernel: forward``; sim/calib/composition.py), cross-validated by k-fold over records.
    Each of ``forms`` is fitted and the better held-out one kept (``sum`` unless
    ``overlap`` is better by OVERLAP_MARGIN); a synchronous device (the CPU) passes
    ``("sum",)``: there the host never overlaps the work it issues. Records timed after
    idleness (``idle_s`` > 0) fit ``idle_scale`` against the warm model instead."""
    idle = [r for r in records if r.get("idle_s")]
    records = [r for r in records if not r.get("idle_s")]
    cols, raw = [], []
    for r in records:
        parts = kernel_parts(cal, r)
        attn = [parts.get(k, 0.0) for k in ATTENTION_PARTS]
        raw.append(sum(parts.values()))
        cols.append([raw[-1] - sum(attn), *attn, float(r["num_layers"]), 1.0])
    cols, raw = np.array(cols), np.array(raw)
    t = np.array([r["time_s"] for r in records], dtype=float)
    solvers = {"sum": (_solve_sum, _predict_sum), "overlap": (_solve_overlap, _predict_overlap)}
    folds = min(folds, len(records))
    if not (folds >= 2 and len(records) >= 6):
        folds = 0
    order = np.random.default_rng(seed).permutation(len(records))
    fitted = {}
    for form in forms:
        solve, predict = solvers[form]
        err = lambda x_, idx: np.abs(predict(x_, cols[idx]) / t[idx] - 1.0)  # noqa: E731
        x = solve(cols, t)
        cv = None
        if folds:
            errors = []
            for f in range(folds):
                test = order[f::folds]
                train = np.setdiff1d(order, test)
                errors.extend(err(solve(cols[train], t[train]), test))
            cv = float(np.mean(errors))
        fitted[form] = (x, cv, float(np.mean(err(x, np.arange(len(t))))))
    form = "sum"
    if "overlap" in fitted:
        cvs, cvo = fitted["sum"][1], fitted["overlap"][1]
        if cvs is not None and cvo is not None and cvo < cvs - OVERLAP_MARGIN:
            form = "overlap"
    x, cv, train = fitted[form]
    comp = Composition(scale=float(x[0]), decode_attention_scale=float(x[1]), prefill_attention_scale=float(x[2]),
                       per_layer_s=float(x[3]), per_step_s=float(x[4]), combine=form,
                       raw_mape=float(np.mean(np.abs(raw / t - 1.0))), cv_mape=cv, train_mape=train,
                       cv_folds=folds, num_records=len(records))
    return _fit_idle(comp, idle, cal) if idle else comp


def _fit_idle(comp: Composition, idle: list[dict], cal: Calibration) -> Composition:
    """``comp`` with the after-idle factor: least relative error of ``k x warm prediction``
    on the steps timed after idleness."""
    ratio = np.array([comp.apply(kernel_parts(cal, r), r["num_layers"]) / r["time_s"] for r in idle])
    k = float(np.sum(ratio) / np.sum(ratio ** 2))
    return dataclasses.replace(comp, idle_scale=k, idle_s=float(np.median([r["idle_s"] for r in idle])),
                               idle_mape=float(np.mean(np.abs(k * ratio - 1.0))))


def describe_composition(c: Composition) -> str:
    cv = "-" if c.cv_mape is None else f"{c.cv_mape:.1%}"
    kernels = (f"{c.scale:.3f} x kernels + {c.decode_attention_scale:.3f} x decode attn + "
               f"{c.prefill_attention_scale:.3f} x prefill attn")
    host = f"{c.per_layer_s * 1e6:.1f} us/layer"
    body = (f"{kernels} + {host} + {c.per_step_s * 1e6:.1f} us" if c.combine == "sum"
            else f"{c.per_step_s * 1e6:.1f} us + max({host}, {kernels})")
    idle = (f"; after {c.idle_s * 1e3:.0f} ms idle x{c.idle_scale:.3f} (MAPE {c.idle_mape:.1%})"
            if c.idle_s and c.idle_mape is not None else "")
    return (f"{'composition':<18}  step = {body}  kernel-sum MAPE {c.raw_mape:.1%} -> cv MAPE {cv} "
            f"({c.combine} form; {c.cv_folds} folds, {c.num_records} steps){idle}")

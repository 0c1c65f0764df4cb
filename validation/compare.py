"""Errors between the simulator and the real engine.

Relative errors are ``(predicted - measured) / measured``: positive means the simulator
is pessimistic (predicts slower than reality). MAPE is the mean of their absolute values.
When the calibration has a composition (sim/calib/composition.py), ``kernel_sum`` gives the
errors of the plain kernel sum too, so its share of the accuracy stays visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.engine.step.correction import step_kind

#: The latency percentiles compared (summary.json's keys; ``p999`` is p99.9). One a summary
#: lacks (an older one's p95) is left out of the comparison.
QUANTILES = ("p50", "p90", "p95", "p99", "p999")


@dataclass(kw_only=True)
class StepTiming:
    """What :func:`step_errors` reads of a step run both ways: the prediction, the measurement,
    the batch's shape (``shape(out)`` of its SchedulerOutput) and, where the calibration has a
    composition, the plain kernel sum. ``sim validate``'s StepSample (validation/runner.py) and
    the in-run InRunSample (validation/inrun.py) add what each knows of the step."""

    predicted_s: float
    measured_s: float
    num_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    decode_kv_tokens: int
    kernel_sum_s: float | None = None


def shape(out) -> dict:
    """A SchedulerOutput's batch shape, as :class:`StepTiming`'s keyword arguments."""
    return {"num_seqs": out.num_seqs, "num_prefill_tokens": out.num_prefill_tokens,
            "num_decode_tokens": out.num_decode_tokens, "decode_kv_tokens": out.decode_kv_tokens}


def step_errors(samples) -> dict:
    """Per-step predicted vs measured time: MAPE, bias, spread, worst steps, by step kind."""
    if not samples:
        return {"num_steps": 0}
    pred = np.array([s.predicted_s for s in samples])
    meas = np.array([s.measured_s for s in samples])
    rel = (pred - meas) / meas
    order = np.argsort(-np.abs(rel))[:5]
    kinds = {}
    for kind in ("prefill", "decode", "mixed"):
        idx = [i for i, s in enumerate(samples) if step_kind(s.num_prefill_tokens, s.num_decode_tokens) == kind]
        if idx:
            kinds[kind] = {"num_steps": len(idx), "mape": float(np.mean(np.abs(rel[idx]))),
                           "bias": float(np.mean(rel[idx]))}
    out = {
        "num_steps": len(samples),
        "mape": float(np.mean(np.abs(rel))),
        "bias": float(np.mean(rel)),
        "median_abs_error": float(np.median(np.abs(rel))),
        "p90_abs_error": float(np.percentile(np.abs(rel), 90)),
        "total_predicted_s": float(pred.sum()),
        "total_measured_s": float(meas.sum()),
        "by_kind": kinds,
        "worst_steps": [{
            "step": int(i), "predicted_s": float(pred[i]), "measured_s": float(meas[i]),
            "rel_error": float(rel[i]), "num_seqs": samples[i].num_seqs,
            "num_prefill_tokens": samples[i].num_prefill_tokens,
            "num_decode_tokens": samples[i].num_decode_tokens,
            "decode_kv_tokens": samples[i].decode_kv_tokens,
        } for i in order],
    }
    if all(s.kernel_sum_s is not None for s in samples):  # the calibration has a composition
        raw = (np.array([s.kernel_sum_s for s in samples]) - meas) / meas
        out["kernel_sum"] = {"mape": float(np.mean(np.abs(raw))), "bias": float(np.mean(raw))}
    return out


IDLE_BUCKETS_S = (0.0, 1e-4, 1e-3, 1e-2, float("inf"))


def errors_by_idle(samples) -> list[dict]:
    """Open loop: step-time errors by the idle time before the step (a step after a lull
    finds caches cold and, on a GPU, clocks down)."""
    out = []
    for lo, hi in zip(IDLE_BUCKETS_S, IDLE_BUCKETS_S[1:]):
        rel = [s.predicted_s / s.measured_s - 1 for s in samples
               if s.idle_before_s is not None and lo <= s.idle_before_s < hi]
        if rel:
            out.append({"idle_from_s": lo, "idle_to_s": None if hi == float("inf") else hi,
                        "num_steps": len(rel), "mape": float(np.mean(np.abs(rel))), "bias": float(np.mean(rel))})
    return out


STEP_COLUMNS = ("mode", "step", "predicted_s", "measured_s", "kernel_sum_s", "num_seqs", "num_prefill_tokens",
                "num_decode_tokens", "decode_kv_tokens", "idle_before_s")


def steps_csv(lockstep, open_loop) -> str:
    """Every compared step, both modes, one row each (``validation_steps.csv``)."""
    import csv  # noqa: PLC0415
    import io  # noqa: PLC0415

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(STEP_COLUMNS)
    for mode, samples in (("lockstep", lockstep or []), ("open-loop", open_loop or [])):
        for i, s in enumerate(samples):
            w.writerow([mode, i, f"{s.predicted_s:.6e}", f"{s.measured_s:.6e}",
                        "" if s.kernel_sum_s is None else f"{s.kernel_sum_s:.6e}", s.num_seqs,
                        s.num_prefill_tokens, s.num_decode_tokens, s.decode_kv_tokens,
                        "" if s.idle_before_s is None or s.idle_before_s == float("inf")
                        else f"{s.idle_before_s:.6e}"])
    return buf.getvalue()


def _rel(sim: float | None, real: float | None) -> float | None:
    if sim is None or real is None or real == 0:
        return None
    return (sim - real) / real


def summary_errors(real: dict, sim: dict) -> dict:
    """Open loop: the simulated summary against the real one, metric by metric."""
    out: dict = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        out[metric] = {q: {"real": real[metric][q], "sim": sim[metric][q],
                           "rel_error": _rel(sim[metric][q], real[metric][q])}
                       for q in QUANTILES if q in real[metric] and q in sim[metric]}
    for key in ("requests_per_s", "output_tokens_per_s"):
        a, b = real["throughput"][key], sim["throughput"][key]
        out[key] = {"real": a, "sim": b, "rel_error": _rel(b, a)}
    a, b = real["kv"]["peak_used_fraction"], sim["kv"]["peak_used_fraction"]
    out["peak_kv_used_fraction"] = {"real": a, "sim": b, "rel_error": _rel(b, a)}
    # Counts, side by side: every kind of preemption (a swap run's preemptions are swaps, and
    # recompute also counts swaps that fell back to it), what they moved or redid, and how
    # many requests each engine finished (the latency quantiles are over those).
    for key in COUNTED_PREEMPTIONS:
        out[f"preemptions_{key}"] = {"real": real["preemptions"].get(key), "sim": sim["preemptions"].get(key)}
    for key in ("arrived", "completed", "rejected"):
        out[key] = {"real": real["requests"][key], "sim": sim["requests"][key]}
    return out


#: Preemption counters compared in the open loop (summary.json ``preemptions`` keys).
COUNTED_PREEMPTIONS = ("recompute", "swap", "swap_fallback_to_recompute", "recomputed_tokens",
                       "swap_out_bytes", "swap_in_bytes")

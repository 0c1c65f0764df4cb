"""summary.json's ``validation`` section for ``sim run --validate-every N`` (validation/inrun.py).

Errors are ``(predicted - measured) / measured`` (positive: the simulator is pessimistic), as
``sim validate``'s (validation/compare.py): MAPE and bias overall and by step kind, the worst
steps, and the drift over the run: the errors in windows of simulated time.
"""

from __future__ import annotations

import numpy as np

from validation.compare import step_errors
from validation.drift import needs_recalibration

DRIFT_WINDOWS = 10
MAX_LISTED = 2000  # samples listed in summary.json (evenly spaced past that)
RECALIBRATE_MAPE = 0.1  # a MAPE past this says to recalibrate (as a drifted calibration would)

COMPARED = ("packing, forward and reading the sampled tokens back, median of 3 runs after an untimed one, "
            "against the cost model's compute time of the batch with no idle period before it; swaps and "
            "the after-idle factor are not sampled")


def _drift_over_run(samples, end_s: float) -> list[dict]:
    """Errors in up to DRIFT_WINDOWS equal windows of simulated time (windows with samples)."""
    if not samples:
        return []
    span = max(end_s, samples[-1].sim_s) or 1.0
    out = []
    for w in range(DRIFT_WINDOWS):
        lo, hi = span * w / DRIFT_WINDOWS, span * (w + 1) / DRIFT_WINDOWS
        rel = [s.predicted_s / s.measured_s - 1 for s in samples
               if lo <= s.sim_s < hi or (w == DRIFT_WINDOWS - 1 and s.sim_s >= hi)]
        if rel:
            out.append({"from_s": lo, "to_s": hi, "num_steps": len(rel), "mape": float(np.mean(np.abs(rel))),
                        "bias": float(np.mean(rel))})
    return out


def _listed(samples) -> list[dict]:
    idx = range(len(samples)) if len(samples) <= MAX_LISTED else \
        np.linspace(0, len(samples) - 1, MAX_LISTED).round().astype(int)
    return [{"step": samples[i].step, "sim_s": samples[i].sim_s, "kind": samples[i].kind,
             "predicted_s": samples[i].predicted_s, "measured_s": samples[i].measured_s,
             "num_seqs": samples[i].num_seqs, "num_prefill_tokens": samples[i].num_prefill_tokens,
             "num_decode_tokens": samples[i].num_decode_tokens, "decode_kv_tokens": samples[i].decode_kv_tokens,
             **({} if samples[i].factor is None else {"factor": samples[i].factor})} for i in idx]


def _correction(validator) -> dict | None:
    corr = validator.correction
    if corr is None:
        return None
    out = {"alpha": corr.alpha, "bounds": [corr.low, corr.high], "final": dict(corr.factors),
           "history": [{"sim_s": t, "kind": k, "factor": f} for t, k, f in corr.history]}
    used = [s for s in validator.samples if s.factor is not None]
    if used:  # the online error: each step's corrected time, with the factor it ran with
        rel = [s.predicted_s * s.factor / s.measured_s - 1 for s in used]
        out["corrected_mape"], out["corrected_bias"] = float(np.mean(np.abs(rel))), float(np.mean(rel))
    return out


def _profile_note(profile: str) -> str:
    if profile == "eager":
        return ""
    return (f"the real engine launches its kernels one by one from Python (kvsim's eager profile); this run's "
            f"profile {profile} models another engine, so part of the error is the profile's, not the kernels' "
            "(sim validate runs eager)")


def _advice(errors: dict, drift: dict | None) -> str:
    if drift is not None and needs_recalibration(drift):
        return ("the machine has changed since it was calibrated (calibration_drift): recalibrate "
                "(microbench calibrate) for a validation of the simulator, not of the drift")
    if errors.get("num_steps") and errors["mape"] > RECALIBRATE_MAPE:
        return (f"step-time MAPE {errors['mape']:.0%} is past {RECALIBRATE_MAPE:.0%}: a calibration measured "
                "on another machine or another day reads so; recalibrate here (microbench calibrate) "
                "and point the scenario's gpu at it")
    return ""


def validation_section(validator, setup: dict, end_s: float, calibration: str) -> dict:
    """The section, from the validator's samples and counts and the setup's facts."""
    samples = validator.samples
    errors = step_errors(samples)
    for w in errors.get("worst_steps", ()):  # step_errors numbers samples; say the engine step
        s = samples[w["step"]]
        w["step"], w["sim_s"], w["kind"] = s.step, s.sim_s, s.kind
    errors.pop("kernel_sum", None)
    eligible = validator.num_steps // validator.every
    return {
        **setup, "calibration": calibration, "every": validator.every, "budget_s": validator.budget_s,
        "engine_steps": validator.num_steps, "eligible_steps": eligible, "sampled_steps": len(samples),
        "skipped_over_budget": validator.skipped, "cost_s": validator.spent_s, "compared": COMPARED,
        **errors, "drift_over_run": _drift_over_run(samples, end_s), "correction": _correction(validator),
        "advice": _advice(errors, setup.get("calibration_drift")), "profile_note": _profile_note(setup["profile"]),
        "samples_listed": min(len(samples), MAX_LISTED), "samples": _listed(samples),
    }


def summary_line(v: dict) -> str:
    """One line for the terminal."""
    head = (f"validation: {v['sampled_steps']} of {v['engine_steps']} steps run on the real engine ({v['device']}, "
            f"{v['cost_s']:.1f} s")
    head += f"; {v['skipped_over_budget']} skipped over the budget)" if v["skipped_over_budget"] else ")"
    if not v.get("num_steps"):
        return head
    kinds = ", ".join(f"{k} {e['mape']:.1%}" for k, e in v["by_kind"].items())
    line = f"{head}: step-time MAPE {v['mape']:.1%}, bias {v['bias']:+.1%} ({kinds})"
    corr = v.get("correction")
    if corr and "corrected_mape" in corr:
        line += f"; corrected MAPE {corr['corrected_mape']:.1%}"
    return line + "".join(f"\n  {n}" for n in (v["advice"], v["profile_note"]) if n)

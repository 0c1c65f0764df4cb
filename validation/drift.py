"""Has the machine changed since it was calibrated? Re-time a few calibrated steps.

A measured calibration keeps its raw timings (``<name>.jsonl``), among them whole
engine steps (``kernel: forward``, sim/calib/composition.py). ``sim validate`` re-times a few
of them on the same device before validating and reports how fast they run now against
then: a validation against a calibration the machine no longer matches measures the
drift, not the simulator. (On the shared 2-core dev VM the same steps ran 15-20% faster
an hour after calibrating; benchmarks/RESULTS.md.)
"""

from __future__ import annotations

import statistics
from pathlib import Path

MAX_STEPS = 8
MAX_STEP_S = 0.1  # re-time only steps that were short: the check stays a few seconds


def reference_steps(jsonl: Path, device_type: str, model=None, max_steps: int = MAX_STEPS) -> list[dict]:
    """Up to ``max_steps`` forward records of ``jsonl`` measured on ``device_type``, spread
    over their durations (at most MAX_STEP_S each); those of ``model``'s shape if any, else
    those of the smallest model (its weights are the quickest to build)."""
    from microbench.records import read_jsonl  # noqa: PLC0415

    records, device = read_jsonl(jsonl)
    measured_on = "cpu" if (device or {}).get("provenance", {}).get("cuda", "none") == "none" else "cuda"
    if measured_on != device_type:
        return []
    steps = sorted((r for r in records if r["kernel"] == "forward" and not r.get("idle_s")
                    and r["time_s"] <= MAX_STEP_S),
                   key=lambda r: r["time_s"])
    if model is not None:
        same = [r for r in steps if (r["hidden_size"], r["num_q_heads"], r["num_kv_heads"], r["intermediate_size"])
                == (model.hidden_size, model.num_attention_heads, model.num_kv_heads, model.intermediate_size)]
        smallest = min((r["hidden_size"] for r in steps), default=0)
        steps = same or [r for r in steps if r["hidden_size"] == smallest]  # else the cheapest model's
    if len(steps) <= max_steps:
        return steps
    return [steps[round(i * (len(steps) - 1) / (max_steps - 1))] for i in range(max_steps)]


def calibration_drift(cal, cal_file: Path | None, device, model=None) -> dict | None:
    """``{"ratio": now / then (median), "num_steps", "steps": [...]}``, or None when the
    calibration has no raw whole-step timings from this kind of device."""
    from microbench.cases import make_fns, release_models  # noqa: PLC0415
    from microbench.timing import time_cpu  # noqa: PLC0415

    name = cal.provenance.get("measurements")
    if cal_file is None or not name or not (cal_file.parent / name).is_file():
        return None
    steps = reference_steps(cal_file.parent / name, device.type, model)
    if not steps:
        return None
    out = []
    for rec in steps:
        shape = {k: v for k, v in rec.items() if k not in ("kernel", "time_s", "p20_s", "p80_s", "repeats", "source")}
        now = time_cpu(make_fns("forward", shape, device), warmup=2, min_repeats=5, min_time_s=0.02).median_s
        out.append({"then_s": rec["time_s"], "now_s": now, "ratio": now / rec["time_s"],
                    **{k: rec[k] for k in ("num_layers", "hidden_size", "decode_seqs", "prefill_seqs", "prefill_query")}})
    release_models()
    ratios = [s["ratio"] for s in out]
    return {"ratio": statistics.median(ratios), "min_ratio": min(ratios), "max_ratio": max(ratios),
            "num_steps": len(out), "steps": out}


def needs_recalibration(drift: dict, median_tol: float = 0.1, any_tol: float = 0.2) -> bool:
    """Has the machine moved: the median step by more than ``median_tol``, or any step by
    more than ``any_tol`` (small, host-bound steps drift most: 1.39x while large ones read
    1.07x on the dev VM, the median 1.11x)?"""
    worst = max(abs(drift["min_ratio"] - 1), abs(drift["max_ratio"] - 1))
    return abs(drift["ratio"] - 1) > median_tol or worst > any_tol

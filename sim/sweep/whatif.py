"""``whatif.html``: one self-contained page to explore a sweep (plotly.js inlined once).

The page embeds the sweep's points as JSON and draws them in the browser, so every
choice is instant: a *view* (the questions users bring: the latency knee against the
request rate, goodput under the SLO, KV waste by allocator, block size, swap vs
recompute, KV dtype), a *metric*, the parameter on the x axis, the parameter drawn as
separate lines, and a slider or dropdown fixing each other varied parameter. A second
chart puts the same points against achieved throughput (the throughput-latency curve),
and a table lists every point, failed ones with their error.
"""

from __future__ import annotations

import html
import json
import math

from plotly.offline import get_plotlyjs

from sim.engine.logs.metrics import stat_label
from sim.sweep.grid import SweepPlan
from sim.outputs.files import flatten
from sim.sweep.whatif_page import PAGE_TEMPLATE

# Metrics shown first, with a label a person can read; other numeric columns follow.
METRIC_LABELS = {
    "throughput.requests_per_s": "throughput (requests/s)",
    "throughput.output_tokens_per_s": "throughput (output tokens/s)",
    "throughput.total_tokens_per_s": "throughput (prompt + output tokens/s)",
    "goodput_requests_per_s": "goodput under the SLO (requests/s)",
    "slo.attained_fraction": "share of finished requests meeting the SLO",
    **{f"{k}.{q}": f"{name} {stat_label(q)} (s)" for k, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"),
                                                                   ("itl_s", "ITL"), ("e2e_s", "E2E latency"))
       for q in ("p50", "p90", "p95", "p99", "p999", "mean")},
    "kv.mean_allocated_unused_fraction": "KV waste: share of allocated KV not holding tokens",
    "kv.mean_token_fraction": "KV pool share holding real tokens (mean)",
    "kv.mean_reserved_unused_fraction": "KV pool share reserved, filled later (mean)",
    "kv.mean_internal_fragmentation_fraction": "KV pool share lost to internal fragmentation",
    "kv.mean_external_fragmentation_fraction": "KV pool share lost to external fragmentation",
    "kv.peak_used_fraction": "KV pool peak allocated share",
    "kv.pool_tokens": "KV pool size (tokens)",
    "kv.max_full_length_seqs": "full-length sequences that fit",
    "requests.completed": "requests completed",
    "requests.rejected": "requests rejected",
    "preemptions.recompute": "preemptions by recompute",
    "preemptions.swap": "preemptions by swap",
    "preemptions.recomputed_tokens": "tokens recomputed after preemption",
    "preemptions.swap_peak_bytes": "swap space peak (bytes)",
    "engine.peak_running": "peak running requests",
    "engine.simulated_s": "simulated time to drain (s)",
}

RATE_KEYS = ("workload.arrival.rate", "workload.trace.speedup")
COLOR_PREFERENCE = ("kv.allocator", "scheduler.preemption", "kv.block_size", "engine.kv_dtype",
                    "scheduler.policy", "engine.max_model_len")

# (name, shown when one of these keys varies, x candidates, line candidates, metric, why)
PRESETS = (
    ("Throughput-latency: where is the knee?", RATE_KEYS, RATE_KEYS, COLOR_PREFERENCE, "e2e_s.p90",
     "Latency against the offered request rate; past the knee, queues grow and latency explodes."),
    ("Goodput under the SLO", RATE_KEYS, RATE_KEYS, COLOR_PREFERENCE, "goodput_requests_per_s",
     "Requests per second that meet both the TTFT and the TPOT SLO."),
    ("KV waste by allocator", ("kv.allocator",), ("kv.allocator",), ("kv.block_size", *COLOR_PREFERENCE),
     "kv.mean_allocated_unused_fraction",
     "Share of allocated KV memory not holding tokens (PagedAttention: 60-80% contiguous, <4% paged)."),
    ("Block size", ("kv.block_size",), ("kv.block_size",), COLOR_PREFERENCE, "throughput.output_tokens_per_s",
     "Bigger blocks waste more of each request's last block; smaller ones cost more table lookups."),
    ("Swap vs recompute", ("scheduler.preemption",), ("kv.block_size", *RATE_KEYS, "scheduler.preemption"),
     ("scheduler.preemption", *COLOR_PREFERENCE), "e2e_s.p90",
     "Preempted requests either copy their KV to the CPU over PCIe or prefill it again."),
    ("KV dtype", ("engine.kv_dtype",), ("engine.kv_dtype",), COLOR_PREFERENCE, "throughput.output_tokens_per_s",
     "Fewer bytes per token: a bigger KV pool and less memory traffic per decode step."),
)


def _label(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def page_data(plan: SweepPlan, records: dict[str, dict]) -> dict:
    """Everything the page's script needs, as plain JSON-able data."""
    rows, numeric = [], {}
    for p in plan.points:
        rec = records.get(p.point_id) or {"status": "missing", "error": "not run", "summary": None}
        flat = flatten(rec.get("summary") or {})
        metrics = {k: v for k, v in flat.items() if _is_number(v) and math.isfinite(v)}
        for k in metrics:
            numeric.setdefault(k, None)
        rows.append({"id": p.point_id, "v": {k: _label(v) for k, v in p.values.items()},
                     "m": metrics, "status": rec["status"], "error": rec.get("error")})
    ordered = [k for k in METRIC_LABELS if k in numeric] + sorted(k for k in numeric if k not in METRIC_LABELS)
    axes = [{"key": a.key, "values": [_label(v) for v in a.values],
             "numeric": all(_is_number(v) for v in a.values),
             "num": [v if _is_number(v) else None for v in a.values]} for a in plan.axes]
    return {
        "scenario": plan.scenario_path,
        "name": str(plan.points[0].data.get("name", "")),
        "axes": axes,
        "metrics": [{"key": k, "label": METRIC_LABELS.get(k, k)} for k in ordered],
        "rows": rows,
        "presets": [_preset(plan.keys, *p) for p in PRESETS],
    }


def _preset(keys, name, needs, xs, colors, metric, why) -> dict:
    if not any(k in keys for k in needs):
        return {"name": name, "x": None, "why": f"vary {' or '.join(needs)} to use this view"}
    x = next(k for k in xs if k in keys)
    color = next((k for k in colors if k in keys and k != x), None)
    return {"name": name, "x": x, "color": color, "metric": metric, "why": why}


def render_whatif(plan: SweepPlan, records: dict[str, dict], plotly_script: str | None = None) -> str:
    """``plotly_script``: the page's plotly.js ``<script>`` (default: inlined)."""
    data = json.dumps(page_data(plan, records), allow_nan=False).replace("</", "<\\/")
    title = f"kvsim what-if: {plan.points[0].data.get('name', plan.scenario_path)}"
    return (PAGE_TEMPLATE.replace("%%TITLE%%", html.escape(title))
            .replace("%%PLOTLYJS%%", plotly_script or f"<script>{get_plotlyjs()}</script>")
            .replace("%%DATA%%", data))

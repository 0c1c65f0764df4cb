"""``validation.html``: the simulator against the real engine, one self-contained page."""

from __future__ import annotations

import html
import json

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_html
from plotly.subplots import make_subplots

from sim.outputs.figures import LatencySeries, latency_cdf_figure


def _steps_figure(samples) -> go.Figure:
    pred = np.array([s.predicted_s for s in samples]) * 1e3
    meas = np.array([s.measured_s for s in samples]) * 1e3
    x = np.arange(len(samples))
    fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38],
                        subplot_titles=("step time over the run", "predicted against measured"))
    fig.add_trace(go.Scatter(x=x, y=meas, name="measured", mode="lines", line_color=REAL_COLOR), 1, 1)
    fig.add_trace(go.Scatter(x=x, y=pred, name="predicted (cost model)", mode="lines", line_color=SIM_COLOR), 1, 1)
    if samples and all(s.kernel_sum_s is not None for s in samples):
        raw = np.array([s.kernel_sum_s for s in samples]) * 1e3
        fig.add_trace(go.Scatter(x=x, y=raw, name="kernel sum (no composition)", mode="lines",
                                 line={"dash": "dot", "color": SIM_COLOR}, visible="legendonly"), 1, 1)
    fig.add_trace(go.Scatter(x=meas, y=pred, mode="markers", name="steps", marker={"size": 4, "color": "#495057"},
                             text=[f"{s.num_seqs} seqs, {s.num_prefill_tokens} prefill, "
                                   f"{s.num_decode_tokens} decode tokens" for s in samples]), 1, 2)
    hi = float(max(pred.max(), meas.max())) if len(samples) else 1.0
    fig.add_trace(go.Scatter(x=[0, hi], y=[0, hi], mode="lines", name="y = x",
                             line={"dash": "dash", "color": "grey"}), 1, 2)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_xaxes(title_text="measured ms", row=1, col=2)
    fig.update_yaxes(title_text="predicted ms", row=1, col=2)
    fig.update_layout(title="Lockstep: every step's batch timed for real and predicted", height=460)
    return fig


def _cdf_figure(real_requests, sim_requests) -> go.Figure:
    return latency_cdf_figure(
        [LatencySeries.of_requests(real_requests, "real", REAL_COLOR),
         LatencySeries.of_requests(sim_requests, "simulated", SIM_COLOR)],
        title="Open loop: latency CDFs, real engine against simulator", log_x=False, height=420)


REAL_COLOR, SIM_COLOR = "#1971c2", "#e8590c"  # the real engine and the simulator, in every panel
_COUNTS = (("completed", "completed"), ("rejected", "rejected"), ("preemptions_recompute", "recompute preemptions"),
           ("preemptions_swap", "swap preemptions"))


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _headline(result: dict) -> str:
    """The key numbers as a short list above the plots."""
    items = []
    drift = result.get("calibration_drift")
    if drift:
        from validation.drift import needs_recalibration  # noqa: PLC0415

        items.append(f"calibration check: {drift['num_steps']} recorded steps run at {drift['ratio']:.2f}x their "
                     f"calibrated time ({drift['min_ratio']:.2f}-{drift['max_ratio']:.2f}x)"
                     + (" (recalibrate: the machine has changed)" if needs_recalibration(drift) else ""))
    lock = result.get("lockstep") or {}
    if lock.get("num_steps"):
        line = (f"lockstep: {lock['num_steps']} steps, MAPE {lock['mape']:.1%}, bias {_pct(lock['bias'])}, "
                f"same decisions as the simulator: {lock['same_decisions_as_simulator']}")
        if "kernel_sum" in lock:
            line += f" (kernel sum alone: MAPE {lock['kernel_sum']['mape']:.1%}, bias {_pct(lock['kernel_sum']['bias'])})"
        items.append(line)
    ol = result.get("open_loop")
    if ol:
        items.append("open loop p50: " + ", ".join(f"{m[:-2].upper()} {_pct(ol[m]['p50']['rel_error'])}"
                                                   for m in ("ttft_s", "tpot_s", "e2e_s"))
                     + f"; throughput {_pct(ol['requests_per_s']['rel_error'])}")
        items.append("open loop counts, real / sim: " + "; ".join(
            f"{label} {ol[key]['real']} / {ol[key]['sim']}" for key, label in _COUNTS if key in ol))
    return "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>" if items else ""


def render_validation(result: dict, lockstep_samples, real_requests, sim_requests) -> str:
    figs = []
    if lockstep_samples:
        figs.append(_steps_figure(lockstep_samples))
    if real_requests is not None:
        figs.append(_cdf_figure(real_requests, sim_requests))
    parts = [to_html(f, full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]
    body = "".join(f"<div>{p}</div>" for p in parts)
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>kvsim validation</title>"
            "<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}</style>"
            f"</head><body><h1>kvsim validation: {html.escape(result['scenario'])}</h1>"
            f"<p>device {html.escape(result['device'])}, calibration "
            f"{html.escape(result['calibration'])} (errors: (simulated - real) / real)</p>{_headline(result)}"
            f"{body}<h2>Errors</h2><pre>"
            + html.escape(json.dumps(result, indent=2)) + "</pre></body></html>")

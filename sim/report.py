"""``report.html``: one self-contained interactive page per run (plotly.js inlined once).

Sections: the summary numbers and the scenario; the KV memory timeline as stacked areas
(tokens, reserved, internal and external fragmentation, free), in the spirit of the
PagedAttention paper's breakdown; batch size and tokens per step; queue lengths; TTFT,
TPOT and E2E CDFs with the SLO marked; a request timeline for a sample of requests.
Long runs are binned to at most ``MAX_POINTS`` points per series (time-weighted means).
"""

from __future__ import annotations

import html
import json

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_html
from plotly.subplots import make_subplots

from sim.metrics import request_latencies

MAX_POINTS = 1500
MAX_TIMELINE_REQUESTS = 60


def _binned(t: np.ndarray, dur: np.ndarray, cols: dict[str, np.ndarray]):
    """Time-weighted means of each column over at most MAX_POINTS bins of steps."""
    n = t.size
    if n <= MAX_POINTS:
        return t, cols
    edges = np.linspace(0, n, MAX_POINTS + 1).astype(int)
    w = np.add.reduceat(dur, edges[:-1])
    w[w == 0] = 1.0
    out = {k: np.add.reduceat(v * dur, edges[:-1]) / w for k, v in cols.items()}
    return t[edges[1:] - 1], out


def _memory_figure(steps: dict, pool: int) -> go.Figure:
    t, dur = steps["time_s"], steps["duration_s"]
    alloc, ext = steps["kv_allocated_slots"], steps["kv_external_frag_slots"]
    parts = {
        "real tokens": steps["kv_token_slots"],
        "reserved, filled later": steps["kv_reserved_slots"],
        "internal fragmentation": steps["kv_internal_frag_slots"],
        "external fragmentation": ext,
        "free": pool - alloc - ext,
    }
    tb, pb = _binned(t, dur, {k: v / pool * 100 for k, v in parts.items()})
    colors = ["#2b8a3e", "#74c0fc", "#f59f00", "#e03131", "#dee2e6"]
    fig = go.Figure()
    for (name, y), color in zip(pb.items(), colors):
        fig.add_trace(go.Scatter(x=tb, y=y, name=name, stackgroup="kv", mode="none", fillcolor=color,
                                 hovertemplate="%{y:.1f}%<extra>" + name + "</extra>"))
    fig.update_layout(title="KV cache memory over time (% of the pool)", yaxis_title="% of KV pool",
                      xaxis_title="simulated time (s)", yaxis_range=[0, 100], hovermode="x unified")
    return fig


def _load_figure(steps: dict) -> go.Figure:
    t, dur = steps["time_s"], steps["duration_s"]
    tb, cols = _binned(t, dur, {k: steps[k] for k in (
        "num_seqs", "num_running", "num_prefill_tokens", "num_decode_tokens", "num_waiting",
        "num_swapped", "num_preempted")})
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=("sequences per step", "tokens per step", "queues"))
    fig.add_trace(go.Scatter(x=tb, y=cols["num_seqs"], name="sequences in batch"), 1, 1)
    fig.add_trace(go.Scatter(x=tb, y=cols["num_running"], name="running (holding KV)"), 1, 1)
    fig.add_trace(go.Scatter(x=tb, y=cols["num_prefill_tokens"], name="prefill tokens",
                             stackgroup="tok"), 2, 1)
    fig.add_trace(go.Scatter(x=tb, y=cols["num_decode_tokens"], name="decode tokens",
                             stackgroup="tok"), 2, 1)
    fig.add_trace(go.Scatter(x=tb, y=cols["num_waiting"], name="waiting"), 3, 1)
    fig.add_trace(go.Scatter(x=tb, y=cols["num_swapped"], name="swapped"), 3, 1)
    fig.add_trace(go.Scatter(x=tb, y=cols["num_preempted"], name="preempted in step"), 3, 1)
    fig.update_layout(title="Engine load (binned means)", xaxis3_title="simulated time (s)",
                      height=720, hovermode="x unified")
    return fig


def _cdf_figure(requests, slo) -> go.Figure:
    lat = [request_latencies(r) for r in requests if r.finish_s is not None]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("TTFT", "TPOT", "E2E latency"))
    for i, (name, limit) in enumerate((("TTFT", slo.ttft_s), ("TPOT", slo.tpot_s), ("E2E", None))):
        vals = np.sort([x[i] for x in lat if x[i] is not None])
        if vals.size:
            step = max(1, vals.size // MAX_POINTS)
            y = np.arange(1, vals.size + 1) / vals.size
            fig.add_trace(go.Scatter(x=vals[::step], y=y[::step], name=name, mode="lines"), 1, i + 1)
        if limit is not None:
            fig.add_vline(x=limit, line_dash="dash", line_color="red", row=1, col=i + 1,
                          annotation_text="SLO", annotation_position="bottom right")
        fig.update_xaxes(title_text="seconds", type="log", row=1, col=i + 1)
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1], row=1, col=1)
    fig.update_layout(title="Latency CDFs (finished requests)", showlegend=False)
    return fig


def _timeline_figure(requests) -> go.Figure:
    sample = [r for r in requests if r.finish_s is not None]
    if len(sample) > MAX_TIMELINE_REQUESTS:
        idx = np.linspace(0, len(sample) - 1, MAX_TIMELINE_REQUESTS).astype(int)
        sample = [sample[i] for i in idx]
    phases = {"queued": "#adb5bd", "prefill (to first token)": "#f59f00", "decode": "#1971c2",
              "done, held in batch": "#e599f7"}
    bars = {k: ([], [], []) for k in phases}  # y, base, length
    labels = []
    for r in sample:
        y = f"req {r.request_id}" + (f" ({r.num_preemptions} preempt.)" if r.num_preemptions else "")
        labels.append(y)
        admitted = r.admitted_s if r.admitted_s is not None else r.first_token_s
        spans = (("queued", r.arrival_s, admitted), ("prefill (to first token)", admitted, r.first_token_s),
                 ("decode", r.first_token_s, r.last_token_s), ("done, held in batch", r.last_token_s, r.finish_s))
        for name, a, b in spans:
            if b > a:
                bars[name][0].append(y)
                bars[name][1].append(a)
                bars[name][2].append(b - a)
    fig = go.Figure()
    for name, (ys, base, length) in bars.items():
        fig.add_trace(go.Bar(y=ys, base=base, x=length, orientation="h", name=name,
                             marker_color=phases[name]))
    fig.update_layout(title=f"Request timeline (a sample of {len(sample)})", barmode="overlay",
                      xaxis_title="simulated time (s)", height=max(400, 14 * len(sample)),
                      yaxis_autorange="reversed", yaxis_categoryorder="array",
                      yaxis_categoryarray=labels)
    return fig


def _summary_html(summary: dict, scenario_yaml: str) -> str:
    rows = []
    for section in ("requests", "throughput", "kv", "preemptions", "engine"):
        for k, v in summary[section].items():
            shown = f"{v:.4g}" if isinstance(v, float) else html.escape(json.dumps(v))
            rows.append(f"<tr><td>{section}.{k}</td><td>{shown}</td></tr>")
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        s = summary[k]
        vals = ", ".join(f"{q} {s[q]:.4g}" for q in ("mean", "p50", "p90", "p99") if s[q] is not None)
        rows.append(f"<tr><td>{k}</td><td>{vals}</td></tr>")
    return (
        "<h2>Summary</h2><table class='summary'>" + "".join(rows) + "</table>"
        "<details><summary>Scenario</summary><pre>" + html.escape(scenario_yaml) + "</pre></details>"
    )


def render_report(result, summary: dict) -> str:
    """The whole report as one HTML string."""
    steps = result.steps.array()
    pool = summary["kv"]["pool_tokens"]
    figs = [_memory_figure(steps, pool), _load_figure(steps),
            _cdf_figure(result.requests, result.scenario.slo), _timeline_figure(result.requests)]
    parts = [to_html(f, full_html=False, include_plotlyjs=(i == 0), config={"responsive": True})
             for i, f in enumerate(figs)]
    sc = result.scenario
    scenario_yaml = json.dumps(sc.model_dump(mode="json"), indent=2)
    title = f"kvsim: {sc.name}"
    head = (f"<h1>{html.escape(title)}</h1><p>{html.escape(summary['model'])} on "
            f"{html.escape(summary['gpu'])} (calibration: {html.escape(summary['calibration_source'])}). "
            f"{html.escape(sc.description)}</p>")
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}"
             "table.summary td{padding:2px 10px;border-bottom:1px solid #eee;font-size:13px}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{head}"
            + "".join(f"<div class='plot'>{p}</div>" for p in parts)
            + _summary_html(summary, scenario_yaml) + "</body></html>")

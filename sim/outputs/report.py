"""``report.html``: one self-contained interactive page per run (plotly.js inlined once).

Sections: the key numbers; the KV memory timeline as stacked areas (tokens, reserved,
internal and external fragmentation, free), in the spirit of the PagedAttention paper's
breakdown; batch size and tokens per step; queue lengths; preemption and swap events;
TTFT, TPOT and E2E CDFs with the SLO marked (log or linear axes); a request timeline for a
sample of requests; every summary number, the scenario and the calibration used.
Long runs are binned to at most ``MAX_POINTS`` points per series (time-weighted means).
A section that fails to render becomes a visible error box (and a warning on stderr), so a
report bug never costs the run its summary and CSVs.
"""

from __future__ import annotations

import html
import json
import sys

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_html
from plotly.subplots import make_subplots

import yaml

from sim.outputs.figures import MAX_POINTS, LatencySeries, latency_cdf_figure

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


def _thin(n: int) -> np.ndarray:
    """At most MAX_POINTS indices of ``n``, the last one included."""
    return np.unique(np.linspace(0, n - 1, min(n, MAX_POINTS)).astype(int)) if n else np.zeros(0, int)


def _events_figure(steps: dict, preemption_mode: str) -> go.Figure:
    """Preemptions and swap transfers, step by step (the steps where they happened)."""
    t, pre, swap = steps["time_s"], steps["num_preempted"], steps["swap_bytes"]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        specs=[[{"secondary_y": True}], [{"secondary_y": True}]],
                        subplot_titles=(f"preemptions (mode: {preemption_mode})",
                                        "swap traffic over PCIe (out + in)"))
    hit = np.flatnonzero(pre > 0)
    hit = hit[_thin(hit.size)] if hit.size else hit
    fig.add_trace(go.Scatter(x=t[hit], y=pre[hit], mode="markers", name="preempted in a step",
                             marker_color="#e03131"), 1, 1)
    idx = _thin(t.size)
    fig.add_trace(go.Scatter(x=t[idx], y=np.cumsum(pre)[idx] if t.size else [], name="preemptions so far",
                             line_shape="hv", line_color="#862e9c"), 1, 1, secondary_y=True)
    moved = np.flatnonzero(swap > 0)
    moved = moved[_thin(moved.size)] if moved.size else moved
    fig.add_trace(go.Scatter(x=t[moved], y=swap[moved] / 2**20, mode="markers",
                             name="swapped in a step (MiB)", marker_color="#1971c2"), 2, 1)
    fig.add_trace(go.Scatter(x=t[idx], y=steps["num_swapped"][idx], name="requests swapped out",
                             line_shape="hv", line_color="#f08c00"), 2, 1, secondary_y=True)
    if not hit.size and not moved.size:
        fig.add_annotation(text="no preemptions and no swaps in this run", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5, font_size=16)
    fig.update_yaxes(title_text="requests", row=1, col=1)
    fig.update_yaxes(title_text="cumulative", row=1, col=1, secondary_y=True)
    fig.update_yaxes(title_text="MiB", row=2, col=1)
    fig.update_yaxes(title_text="swapped out", row=2, col=1, secondary_y=True)
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(title="Preemption and swap events", xaxis2_title="simulated time (s)", height=560)
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


_CAL_SCALARS = ("gpu_name", "memory_bytes", "hbm_bandwidth_bytes_per_s", "bandwidth_efficiency", "peak_flops",
                "compute_eff_max", "compute_m_half_tokens", "pcie_bandwidth_bytes_per_s", "kernel_launch_s",
                "step_overhead_s", "schema")


def _rows(pairs) -> str:
    return "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_shown(v))}</td></tr>" for k, v in pairs)


def _kernels_html(kernels: dict) -> str:
    """Fitted kernel models (measured calibrations): accuracy and parameters, one row each."""
    if not kernels:
        return ""
    head = "<tr><th>kernel</th><th>cv MAPE</th><th>train MAPE</th><th>records</th><th>shapes</th>" \
           "<th>measured rows</th><th>parameters</th></tr>"
    rows = []
    for name, fit in kernels.items():
        params = ", ".join(f"{k} {_shown(v)}" for k, v in fit.params.items())
        cells = [name, *("-" if v is None else f"{v:.1%}" for v in (fit.cv_mape, fit.train_mape)),
                 str(fit.num_records), str(fit.num_shapes),
                 str(len(fit.grid)), params]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<h3>Fitted kernel models ({len(kernels)})</h3><table class='summary'>{head}{''.join(rows)}</table>"


def _calibration_html(calibration) -> str:
    """The calibration the run used: its numbers, fitted kernels and step composition when
    measured, and its provenance (never the raw measurement grids)."""
    if calibration is None:
        return ""
    label = getattr(calibration, "source_label", str(calibration.source))
    parts = [f"<p>{html.escape(calibration.name)} ({html.escape(label)})</p>",
             "<table class='summary'>" + _rows((k, getattr(calibration, k)) for k in _CAL_SCALARS) + "</table>",
             _kernels_html(calibration.kernels)]
    if calibration.composition is not None:
        parts.append("<h3>Step composition (kernel sum to measured step)</h3><table class='summary'>"
                     + _rows(calibration.composition.to_dict().items()) + "</table>")
    if calibration.provenance:
        parts.append(f"<h3>Provenance</h3><table class='summary'>{_rows(calibration.provenance.items())}</table>")
    return "<details open><summary>Calibration</summary>" + "".join(parts) + "</details>"


def _shown(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else v if isinstance(v, str) else str(v)


def _summary_html(summary: dict, scenario_yaml: str) -> str:
    rows = []
    for section in ("requests", "throughput", "kv", "preemptions", "engine"):
        for k, v in summary.get(section, {}).items():
            shown = f"{v:.4g}" if isinstance(v, float) else html.escape(json.dumps(v))
            rows.append(f"<tr><td>{section}.{k}</td><td>{shown}</td></tr>")
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        s = summary[k]
        vals = ", ".join(f"{q} {s[q]:.4g}" for q in ("mean", "p50", "p90", "p99") if s[q] is not None)
        rows.append(f"<tr><td>{k}</td><td>{vals}</td></tr>")
    return (
        "<h2>Summary</h2><table class='summary'>" + "".join(rows) + "</table>"
        "<details open><summary>Scenario (as run, defaults filled in)</summary><pre>"
        + html.escape(scenario_yaml) + "</pre></details>"
    )


def _card(value: str, label: str) -> str:
    return f"<div class='card'><b>{html.escape(value)}</b><span>{html.escape(label)}</span></div>"


def _key_numbers_html(s: dict) -> str:
    """The numbers people look for first, as cards above the plots."""
    r, kv, pre = s["requests"], s["kv"], s["preemptions"]

    def ms(section: str, q: str) -> str:
        v = s[section].get(q)
        return "-" if v is None else f"{v * 1e3:,.0f} ms" if v < 10 else f"{v:,.0f} s"

    attained = s.get("slo", {}).get("attained_fraction")
    cards = [
        _card(f"{r['completed']:,} / {r['arrived']:,}", "requests completed / arrived"),
        _card(f"{r['rejected']:,}", "rejected" + (f" ({', '.join(r['rejected_by_reason'])})" if r["rejected"] else "")),
        _card(f"{s['throughput']['requests_per_s']:.2f} req/s", f"{s['throughput']['output_tokens_per_s']:,.0f} output tokens/s"),
        _card(f"{s['goodput_requests_per_s']:.2f} req/s", "goodput" + (f" ({attained:.0%} meet the SLO)" if attained is not None else "")),
        _card(f"{ms('ttft_s', 'p50')} / {ms('ttft_s', 'p99')}", "TTFT p50 / p99"),
        _card(f"{ms('tpot_s', 'p50')} / {ms('tpot_s', 'p99')}", "TPOT p50 / p99"),
        _card(f"{kv['mean_allocated_unused_fraction']:.1%}", "allocated KV not holding tokens"),
        _card(f"{kv['peak_used_fraction']:.0%}", f"peak KV pool use ({kv['pool_tokens']:,} tokens)"),
        _card(f"{pre['recompute']:,} / {pre['swap']:,}", "preemptions: recompute / swap"),
    ]
    return "<div class='cards'>" + "".join(cards) + "</div>"


def _load_calibration(sc):
    from sim.calib.calibration import load_calibration
    from sim.errors import ConfigError

    try:
        return load_calibration(sc.gpu, source=sc.source_path, key="gpu")
    except ConfigError:
        return None


def render_report(result, summary: dict, calibration=None) -> str:
    """The whole report as one HTML string. ``calibration``: the one the run used (read
    again from the scenario's ``gpu`` when not given). Never raises for a bug of its own: a
    section that fails is an error box, a page that fails a page saying so (module docstring)."""
    page = _guarded("whole report", lambda: _render(result, summary, calibration))
    if "<html>" in page:
        return page
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>kvsim report</title></head><body>{page}</body></html>"


def _render(result, summary: dict, calibration) -> str:
    steps = result.steps.array()
    pool = summary["kv"]["pool_tokens"]
    sc = result.scenario
    figs = {"KV memory": lambda: _memory_figure(steps, pool), "engine load": lambda: _load_figure(steps),
            "preemption events": lambda: _events_figure(steps, str(sc.scheduler.preemption)),
            "latency CDFs": lambda: latency_cdf_figure(
                [LatencySeries.of_requests(result.requests)], slo_s=(sc.slo.ttft_s, sc.slo.tpot_s, None),
                axis_toggle=True),
            "request timeline": lambda: _timeline_figure(result.requests)}
    parts, js = [], True
    for name, build in figs.items():
        part = _guarded(name, lambda: to_html(build(), full_html=False, include_plotlyjs=js,
                                              config={"responsive": True}))
        js = js and "section-error" in part  # plotly.js inlined once, with the first figure drawn
        parts.append(part)
    scenario_yaml = yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False)
    if calibration is None:
        calibration = _load_calibration(sc)
    title = f"kvsim: {sc.name}"
    head = (f"<h1>{html.escape(title)}</h1><p>{html.escape(summary['model'])} on "
            f"{html.escape(summary['gpu'])} (calibration: "
            f"{html.escape(summary.get('calibration_label', summary['calibration_source']))}). "
            f"{html.escape(sc.description)}</p>")
    head += "".join(f"<p class='note'><b>Note:</b> {html.escape(n)}</p>" for n in summary.get("notes", ()))
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}"
             "table.summary td{padding:2px 10px;border-bottom:1px solid #eee;font-size:13px}"
             ".cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:#f1f3f5;border-radius:6px;"
             "padding:6px 12px;min-width:150px}.card b{display:block;font-size:20px}"
             ".card span{font-size:12px;color:#495057}"
             ".note{background:#fff3bf;border-left:4px solid #f59f00;padding:6px 10px}"
             "h3{font-size:15px;margin:1em 0 .3em}table.summary th{text-align:left;font-size:13px;padding:2px 10px}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{head}{_key_numbers_html(summary)}"
            + "".join(f"<div class='plot'>{p}</div>" for p in parts)
            + _guarded("summary", lambda: _summary_html(summary, scenario_yaml))
            + _guarded("calibration", lambda: _calibration_html(calibration)) + "</body></html>")


def _guarded(name: str, render) -> str:
    """One section's HTML; a section that fails becomes a visible error box (and a warning on
    stderr) instead of taking the whole report, and the run's other outputs, down with it."""
    try:
        return render()
    except Exception as exc:  # noqa: BLE001 - any bug in one section must not lose the run
        print(f"warning: report.html: the {name} section failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return (f"<p class='note section-error'><b>The {html.escape(name)} section could not be drawn:</b> "
                f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</p>")

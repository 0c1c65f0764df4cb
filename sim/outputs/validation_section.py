"""report.html's validation section (``sim run --validate-every N``): summary.json's
``validation`` dict drawn as numbers, tables and one figure (each sampled step's error over
simulated time by step kind; with ``--correct``, each kind's factor over time). It reads the
dict only: the simulator's outputs never import the real engine.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.subplots import make_subplots

_COLORS = {"prefill": "#1c7ed6", "decode": "#37b24d", "mixed": "#f59f00"}


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def validation_figure(v: dict) -> go.Figure:
    corr = v.get("correction")
    rows = 2 if corr else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.1, subplot_titles=(
        "sampled steps: (predicted - measured) / measured", *(("--correct: factor per step kind",) if corr else ())))
    for kind, color in _COLORS.items():
        pts = [s for s in v["samples"] if s["kind"] == kind]
        if pts:
            fig.add_trace(go.Scatter(
                x=[s["sim_s"] for s in pts], y=[s["predicted_s"] / s["measured_s"] - 1 for s in pts],
                mode="markers", name=f"{kind} error", marker={"color": color, "size": 6},
                text=[f"step {s['step']}: {s['num_seqs']} seqs, {s['num_prefill_tokens']} prefill tokens"
                      for s in pts]), 1, 1)
        if corr:
            hist = [h for h in corr["history"] if h["kind"] == kind]
            if hist:
                fig.add_trace(go.Scatter(x=[0.0] + [h["sim_s"] for h in hist], y=[1.0] + [h["factor"] for h in hist],
                                         mode="lines", line={"shape": "hv", "color": color},
                                         name=f"{kind} factor"), 2, 1)
    fig.update_yaxes(tickformat="+.0%", row=1, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=rows, col=1)
    fig.update_layout(title="Validation inside the run (real engine on " + v["device"] + ")",
                      height=380 * rows)
    return fig


def _table(head: tuple, rows: list) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table class='summary'><tr>{th}</tr>{body}</table>"


def validation_html(v: dict) -> str:
    parts = ["<h2>Validation against the real engine</h2>",
             f"<p>{v['sampled_steps']} of {v['engine_steps']} engine steps (every {v['every']}th) also ran on the "
             f"real engine on {html.escape(v['device'])} ({v['torch_threads']} torch threads), costing "
             f"{v['cost_s']:.1f} s of a {v['budget_s']:g} s budget; {v['skipped_over_budget']} skipped over the "
             f"budget. Compared: {html.escape(v['compared'])}. Calibration {html.escape(v['calibration'])}, "
             f"engine profile {html.escape(v['profile'])}.</p>"]
    for note in (v.get("advice"), v.get("profile_note")):
        if note:
            parts.append(f"<p class='note'><b>Note:</b> {html.escape(note)}</p>")
    drift = v.get("calibration_drift")
    if drift:
        parts.append(f"<p>Calibration check: {drift['num_steps']} of the calibration's recorded steps run at "
                     f"{drift['ratio']:.2f}x their calibrated time now ({drift['min_ratio']:.2f}-"
                     f"{drift['max_ratio']:.2f}x).</p>")
    if not v.get("num_steps"):
        return "".join(parts) + "<p>No step was sampled.</p>"
    rows = [("all", v["num_steps"], f"{v['mape']:.1%}", _pct(v["bias"]))]
    rows += [(k, e["num_steps"], f"{e['mape']:.1%}", _pct(e["bias"])) for k, e in v["by_kind"].items()]
    parts += ["<h3>Step-time error by step kind</h3>", _table(("kind", "steps", "MAPE", "bias"), rows)]
    parts += ["<h3>Over the run (windows of simulated time)</h3>", _table(
        ("from (s)", "to (s)", "steps", "MAPE", "bias"),
        [(f"{w['from_s']:.2f}", f"{w['to_s']:.2f}", w["num_steps"], f"{w['mape']:.1%}", _pct(w["bias"]))
         for w in v["drift_over_run"]])]
    parts += ["<h3>Worst steps</h3>", _table(
        ("step", "simulated (s)", "kind", "seqs", "prefill tokens", "decode KV tokens", "predicted (ms)",
         "measured (ms)", "error"),
        [(w["step"], f"{w['sim_s']:.3f}", w["kind"], w["num_seqs"], w["num_prefill_tokens"], w["decode_kv_tokens"],
          f"{w['predicted_s'] * 1e3:.2f}", f"{w['measured_s'] * 1e3:.2f}", _pct(w["rel_error"]))
         for w in v["worst_steps"]])]
    corr = v.get("correction")
    if corr:
        final = ", ".join(f"{k} {f:.3f}" for k, f in corr["final"].items())
        online = f"; the corrected step times' MAPE {corr['corrected_mape']:.1%}" if "corrected_mape" in corr else ""
        parts.append(f"<p>--correct: factors bounded to [{corr['bounds'][0]:g}, {corr['bounds'][1]:g}], EWMA "
                     f"weight {corr['alpha']:g}; final {final}{online}.</p>")
    return "".join(parts)

"""plan.html: one self-contained Plotly page (no network): cost per hour of the target
deployment against each configuration's max rate (Pareto front marked), max rate per value
of each searched key, and the ranked table with each configuration's reason."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio

from sim.plan.spec import PlanSpec
from sim.plan.unit import UNIT_HEAD, short_label, unit_cells


def _label(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


def cost_figure(spec: PlanSpec, ranked: list[dict]) -> go.Figure:
    ok = [r for r in ranked if r["status"] == "feasible"]
    fig = go.Figure()
    for on_front, name, symbol in ((False, "configuration", "circle-open"), (True, "Pareto front", "diamond")):
        pts = [r for r in ok if r["pareto"] == on_front]
        fig.add_trace(go.Scatter(
            x=[r["max_rate"] for r in pts], y=[r["cost_per_hour"] for r in pts], mode="markers", name=name,
            marker={"symbol": symbol, "size": 11}, text=[_label(r["values"]) + f"<br>{r['gpus']} GPUs" for r in pts],
            hovertemplate="%{text}<br>max rate %{x:.2f} req/s<br>$%{y:.2f}/h<extra></extra>"))
    front = sorted((r for r in ok if r["pareto"]), key=lambda r: r["max_rate"])
    fig.add_trace(go.Scatter(x=[r["max_rate"] for r in front], y=[r["cost_per_hour"] for r in front],
                             mode="lines", line={"dash": "dot"}, showlegend=False, hoverinfo="skip"))
    what = "unit" if spec.clustered else "replica"
    fig.update_layout(title=f"Cost per hour to serve {spec.target_rate:g} req/s against max rate per {what}",
                      xaxis_title=f"max rate of one {what} under the SLO (req/s)",
                      yaxis_title="cost of the deployment (USD/h)", height=460)
    return fig


def key_figure(spec: PlanSpec, ranked: list[dict], key: str) -> go.Figure:
    """Max rate per value of ``key``: every configuration with that value (0 when none passes)."""
    fig = go.Figure()

    def label(r: dict) -> str:  # a whole cluster mapping: the unit it makes, in short
        if key in ("cluster", "cluster.disaggregation") and r.get("unit") is not None:
            return short_label(r["unit"])
        return str(r["values"][key])

    values = []
    for r in sorted(ranked, key=lambda r: r["index"]):
        v = label(r)
        if v not in values:
            values.append(v)
    fig.add_trace(go.Box(
        x=[label(r) for r in ranked], y=[r["max_rate"] or 0.0 for r in ranked],
        boxpoints="all", pointpos=0, name=key, text=[_label(r["values"]) + f"<br>{r['status']}" for r in ranked],
        hovertemplate="%{text}<br>max rate %{y:.2f} req/s<extra></extra>"))
    fig.update_layout(title=f"Max rate per value of {key} (0: infeasible or never meets the SLO)",
                      xaxis={"title": key, "categoryorder": "array", "categoryarray": values},
                      yaxis_title="max rate (req/s)", height=380, showlegend=False)
    return fig


def _table(spec: PlanSpec, ranked: list[dict]) -> str:
    units = UNIT_HEAD if spec.clustered else ()
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("rank", *spec.keys, "status", *units, "GPUs", "USD/h",
                                                           "why"))
    rows = []
    for r in ranked:
        cells = [r["rank"] or "-", *(r["values"][k] for k in spec.keys), r["status"],
                 *(unit_cells(r) if spec.clustered else ()), r["gpus"] or "-",
                 "-" if r["cost_per_hour"] is None else f"{r['cost_per_hour']:.2f}", r["why"]]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def render_plan_page(spec: PlanSpec, ranked: list[dict], probes: dict | None = None, plotly=True) -> str:
    slo = spec.slo
    figs = [cost_figure(spec, ranked)] + [key_figure(spec, ranked, k) for k in spec.keys]
    charts = [pio.to_html(f, full_html=False, include_plotlyjs=plotly if i == 0 else False)
              for i, f in enumerate(figs)]
    title = html.escape(f"kvsim plan: {spec.name}")
    lead = html.escape(
        f"Target {spec.target_rate:g} req/s; SLO p{slo.percentile:g} TTFT <= {slo.ttft_s * 1e3:g} ms and "
        f"p{slo.percentile:g} TPOT <= {slo.tpot_s * 1e3:g} ms, {slo.attainment:.0%} of requests meeting both; "
        f"probes of at least {spec.search.num_requests} requests and {spec.search.min_duration_s:g} s of arrivals "
        f"(the first {spec.search.warmup:.0%} not judged), the scenario's seed in every probe"
        + (f"; each answer confirmed by a run of {spec.search.confirm_duration_s:g} s of arrivals. "
           if spec.search.confirm_duration_s > 0 else ". ")
        + ("A unit (its replicas behind its router, or its prefill and decode pools) is simulated whole; units "
           "are assumed to share the load evenly." if spec.clustered else
           "Replicas are assumed to share the load evenly; the fleet itself is not simulated.")
        + ("" if probes is None else f" {probes['run']} probes run"
           + (f"; bracket reuse along {probes['reuse_key']}: {probes['warm_started']} searches started from "
              f"their smaller-pool neighbour's answer, about {probes['saved_estimate']} probes saved."
              if probes["reuse_key"] else ".")))
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title><style>"
            "body{font-family:system-ui,sans-serif;margin:1.5em 2em;max-width:1300px}"
            "table{border-collapse:collapse;font-size:12px}td,th{padding:2px 8px;border-bottom:1px solid #e9ecef;"
            "text-align:left}</style></head><body>"
            f"<h1>{title}</h1><p>{lead}</p>{''.join(charts)}<h2>Configurations, cheapest first</h2>"
            f"{_table(spec, ranked)}</body></html>\n")

"""``sim compare DIR DIR ...``: overlay finished runs (folders written by ``sim run``).

Reads each folder's summary.json, requests.csv and steps.csv; prints a table of the key
numbers, one column per run; writes ``compare.html`` (self-contained, plotly.js inlined
once): key numbers as grouped bars, TTFT / TPOT / E2E CDFs overlaid, KV memory over time
overlaid, and every summary number side by side.
"""

from __future__ import annotations

import csv
import html
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_html
from plotly.subplots import make_subplots

from sim.errors import ConfigError
from sim.outputs.figures import LatencySeries, latency_cdf_figure
from sim.outputs.files import write_atomic
from sim.outputs.files import flatten

KEY_METRICS = (
    ("throughput.requests_per_s", "throughput (req/s)"),
    ("throughput.output_tokens_per_s", "output tokens/s"),
    ("goodput_requests_per_s", "goodput (req/s)"),
    ("ttft_s.p50", "TTFT p50 (s)"), ("ttft_s.p99", "TTFT p99 (s)"),
    ("tpot_s.p50", "TPOT p50 (s)"), ("tpot_s.p99", "TPOT p99 (s)"),
    ("e2e_s.p90", "E2E p90 (s)"),
    ("kv.mean_allocated_unused_fraction", "KV allocated but unused"),
    ("requests.rejected", "rejected"),
    ("preemptions.recompute", "preempted (recompute)"), ("preemptions.swap", "preempted (swap)"),
)


@dataclass(frozen=True)
class Run:
    label: str
    summary: dict
    flat: dict
    requests: dict[str, np.ndarray]  # ttft_s, tpot_s, e2e_s of finished requests
    steps: dict[str, np.ndarray]  # time_s, kv_token_slots, kv_allocated_slots


def _columns(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    if not path.is_file():
        return {n: np.zeros(0) for n in names}
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {n: np.array([float(r[n]) for r in rows if r.get(n) not in (None, "")]) for n in names}


def load_run(folder: str, label: str) -> Run:
    d = Path(folder)
    path = d / "summary.json"
    if not path.is_file():
        raise ConfigError(folder, "summary.json", "not found; give folders written by `sim run`")
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(str(path), "<json>", f"malformed: {exc}") from None
    return Run(label, summary, flatten(summary),
               _columns(d / "requests.csv", ("ttft_s", "tpot_s", "e2e_s")),
               _columns(d / "steps.csv", ("time_s", "kv_token_slots", "kv_allocated_slots")))


def _labels(folders: list[str]) -> list[str]:
    names = [Path(f).resolve().name for f in folders]
    return names if len(set(names)) == len(names) else [str(Path(f)) for f in folders]


def _colors(runs: list[Run]) -> list[str]:
    """One colour per run, shared by the bars and the CDFs."""
    return [f"hsl({int(i * 360 / max(1, len(runs)))},60%,45%)" for i in range(len(runs))]


def _bars(runs: list[Run]) -> go.Figure:
    n = len(KEY_METRICS)
    fig = make_subplots(rows=(n + 3) // 4, cols=4, subplot_titles=[t for _, t in KEY_METRICS],
                        vertical_spacing=0.12)
    colors = _colors(runs)
    for i, (key, _) in enumerate(KEY_METRICS):
        for j, run in enumerate(runs):
            fig.add_trace(go.Bar(x=[run.label], y=[run.flat.get(key)], name=run.label, marker_color=colors[j],
                                 showlegend=i == 0, legendgroup=run.label), i // 4 + 1, i % 4 + 1)
    fig.update_layout(title="Key numbers", height=260 * ((n + 3) // 4), barmode="group")
    fig.update_xaxes(showticklabels=False)
    return fig


def _cdfs(runs: list[Run]) -> go.Figure:
    return latency_cdf_figure([
        LatencySeries(run.label, run.requests["ttft_s"], run.requests["tpot_s"], run.requests["e2e_s"], color)
        for run, color in zip(runs, _colors(runs))])


def _memory(runs: list[Run]) -> go.Figure:
    fig = go.Figure()
    for run in runs:
        pool = run.summary.get("kv", {}).get("pool_tokens") or 1
        s = run.steps
        step = max(1, s["time_s"].size // 1500)
        for col, dash, what in (("kv_allocated_slots", "solid", "allocated"), ("kv_token_slots", "dot", "real tokens")):
            fig.add_trace(go.Scatter(x=s["time_s"][::step], y=s[col][::step] / pool * 100, mode="lines",
                                     line_dash=dash, name=f"{run.label}: {what}", legendgroup=run.label))
    fig.update_layout(title="KV memory over time (% of each run's pool; dotted: real tokens)",
                      xaxis_title="simulated time (s)", yaxis_title="% of KV pool", yaxis_range=[0, 100])
    return fig


def _table_html(runs: list[Run]) -> str:
    keys = list(dict.fromkeys(k for r in runs for k in r.flat if k != "sim_wall_s"))
    head = "<tr><th>metric</th>" + "".join(f"<th>{html.escape(r.label)}</th>" for r in runs) + "</tr>"
    rows = []
    for k in keys:
        vals = [r.flat.get(k) for r in runs]
        differ = len({json.dumps(v) for v in vals}) > 1
        cells = "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in vals)
        rows.append(f"<tr{' class=diff' if differ else ''}><td>{html.escape(k)}</td>{cells}</tr>")
    return "<h2>Every summary number</h2><p>Rows that differ are highlighted.</p><table>" + head + "".join(rows) + "</table>"


def _fmt(v) -> str:
    return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def render_compare(runs: list[Run]) -> str:
    figs = [_bars(runs), _cdfs(runs), _memory(runs)]
    parts = [to_html(f, full_html=False, include_plotlyjs=(i == 0), config={"responsive": True})
             for i, f in enumerate(figs)]
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}"
             "td,th{padding:2px 10px;border-bottom:1px solid #eee;font-size:13px;text-align:left}"
             "tr.diff td{background:#fff9db}")
    title = "kvsim compare: " + ", ".join(r.label for r in runs)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            + "".join(f"<div class='plot'>{p}</div>" for p in parts) + _table_html(runs) + "</body></html>")


def print_table(runs: list[Run]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="sim compare", header_style="bold")
    t.add_column("metric")
    for r in runs:
        t.add_column(r.label, justify="right")
    for key, label in KEY_METRICS:
        t.add_row(label, *(_fmt(r.flat.get(key)) or "-" for r in runs))
    Console().print(t)


def run_compare(args) -> int:
    runs = [load_run(f, label) for f, label in zip(args.runs, _labels(args.runs))]
    out = Path(args.out)
    if out.parent and not out.parent.is_dir():
        raise ConfigError(args.out, "--out", "its folder does not exist")
    write_atomic(out, render_compare(runs))
    if not args.quiet:
        print_table(runs)
        print(f"wrote {out}")
    return 0

"""``sim compare DIR DIR ...``: overlay finished runs (folders written by ``sim run``).

Reads each folder's summary.json, requests.csv and steps.csv; prints a table of the key
numbers, one column per run; writes ``compare.html`` (self-contained, plotly.js inlined
once): key numbers as grouped bars, TTFT / TPOT / E2E CDFs overlaid, KV memory over time
overlaid, and every summary number side by side.
"""

from __future__ import annotations

import csv
import html
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.io import to_html
from plotly.subplots import make_subplots

from sim.engine.logs.metrics import stat_label
from sim.errors import ConfigError
from sim.outputs.figures import LatencySeries, latency_cdf_figure, run_colors
from sim.outputs.files import write_atomic
from sim.outputs.files import flatten


def _percentiles(key: str, name: str, stats: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(summary key, label) of a latency's percentiles, e.g. ("ttft_s.p95", "TTFT p95 (s)")."""
    return tuple((f"{key}.{q}", f"{name} {stat_label(q)} (s)") for q in stats)


KEY_METRICS = (
    ("engine.gpus", "GPUs"),
    ("throughput.requests_per_s", "throughput (req/s)"),
    ("throughput.output_tokens_per_s", "output tokens/s"),
    ("throughput.output_tokens_per_s_per_gpu", "output tokens/s per GPU"),  # derived in load_run
    ("goodput_requests_per_s", "goodput (req/s)"),
    *_percentiles("ttft_s", "TTFT", ("p50", "p95", "p99", "p999")),
    *_percentiles("tpot_s", "TPOT", ("p50", "p95", "p99", "p999")),
    *_percentiles("itl_s", "ITL", ("p50", "p95", "p99", "p999")),
    *_percentiles("e2e_s", "E2E", ("p90", "p95", "p99", "p999")),
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


def _text(path: Path) -> str:
    """A file's text; unreadable, empty or non-UTF-8 files are bad input (one error line)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), "<file>", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), "<encoding>", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start}); `sim run` writes UTF-8") from None
    if not text.strip():
        raise ConfigError(str(path), "<file>", "empty; give folders written by `sim run`")
    return text


def _number(cell: str, path: Path, column: str, line: int) -> float:
    try:
        value = float(cell)
    except ValueError:
        value = float("nan")
    if not np.isfinite(value):
        raise ConfigError(str(path), column, f"line {line}: {cell!r} is not a finite number")
    return value


def _columns(path: Path, names: tuple[str, ...], *, required: bool) -> dict[str, np.ndarray]:
    """Numeric columns of a run's CSV. ``required``: every row has every column (steps);
    otherwise an empty cell is a value the run did not have (an unfinished request)."""
    if not path.is_file():
        return {n: np.zeros(0) for n in names}
    try:
        reader = csv.reader(io.StringIO(_text(path)))
        header = next(reader)
        missing = [n for n in names if n not in header]
        if missing:
            has = "".join(c if c.isprintable() else "?" for c in ", ".join(header))
            raise ConfigError(str(path), missing[0], f"missing column; needs {', '.join(names)}; the header has "
                              f"{has[:160] + '...' if len(has) > 160 else has or 'nothing'}")
        index = [header.index(n) for n in names]
        cols: dict[str, list[float]] = {n: [] for n in names}
        for row in reader:
            if not row:
                continue
            for n, i in zip(names, index):
                cell = row[i].strip() if i < len(row) else ""
                if cell:
                    cols[n].append(_number(cell, path, n, reader.line_num))
                elif required:
                    raise ConfigError(str(path), n, f"line {reader.line_num}: empty cell; every step has a value")
    except csv.Error as exc:
        raise ConfigError(str(path), "<csv>", f"malformed CSV: {exc}") from None
    return {n: np.array(v, dtype=float) for n, v in cols.items()}


def _number_or_none(summary: dict, key: str, path: Path):
    node = summary
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None  # a key an older summary lacks: shown as "-"
        node = node[part]
    if node is not None and (isinstance(node, bool) or not isinstance(node, (int, float))):
        raise ConfigError(str(path), key, f"expected a number or null, got {json.dumps(node)[:60]}")
    return node


def _summary(path: Path) -> dict:
    try:
        summary = json.loads(_text(path))
    except ValueError as exc:
        raise ConfigError(str(path), "<json>", f"malformed JSON: {exc}") from None
    if not isinstance(summary, dict):
        raise ConfigError(str(path), "<root>", "expected a JSON object (the summary `sim run` writes)")
    pool = _number_or_none(summary, "kv.pool_tokens", path)
    if pool is None or pool <= 0:
        raise ConfigError(str(path), "kv.pool_tokens", "expected a positive number (the KV pool size), got "
                          + ("nothing" if pool is None else str(pool)))
    for key, _ in KEY_METRICS:
        _number_or_none(summary, key, path)
    return summary


def load_run(folder: str, label: str) -> Run:
    d = Path(folder)
    path = d / "summary.json"
    if not path.is_file():
        raise ConfigError(folder, "summary.json", "not found; give folders written by `sim run`")
    summary = _summary(path)
    steps = _columns(d / "steps.csv", ("time_s", "kv_token_slots", "kv_allocated_slots"), required=True)
    flat = flatten(summary)
    gpus, tokens = flat.get("engine.gpus"), flat.get("throughput.output_tokens_per_s")
    if gpus and tokens is not None:  # a cluster against one engine: per GPU (summaries before GPUs were counted: -)
        flat["throughput.output_tokens_per_s_per_gpu"] = tokens / gpus
    return Run(label, summary, flat,
               _columns(d / "requests.csv", ("ttft_s", "tpot_s", "e2e_s"), required=False), steps)


def _labels(folders: list[str]) -> list[str]:
    names = [Path(f).resolve().name for f in folders]
    return names if len(set(names)) == len(names) else [str(Path(f)) for f in folders]


def _colors(runs: list[Run]) -> list[str]:
    """One colour per run, the same in every panel: bars, CDFs and KV memory."""
    return run_colors(len(runs))


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
    fig.update_yaxes(rangemode="tozero")
    return fig


def _cdfs(runs: list[Run]) -> go.Figure:
    return latency_cdf_figure([
        LatencySeries(run.label, run.requests["ttft_s"], run.requests["tpot_s"], run.requests["e2e_s"], color)
        for run, color in zip(runs, _colors(runs))])


def _memory(runs: list[Run]) -> go.Figure:
    fig = go.Figure()
    for run, color in zip(runs, _colors(runs)):
        pool = run.summary["kv"]["pool_tokens"]
        s = run.steps
        step = max(1, s["time_s"].size // 1500)
        for col, dash, what in (("kv_allocated_slots", "solid", "allocated"), ("kv_token_slots", "dot", "real tokens")):
            fig.add_trace(go.Scatter(x=s["time_s"][::step], y=s[col][::step] / pool * 100, mode="lines",
                                     line_dash=dash, line_color=color, name=f"{run.label}: {what}",
                                     legendgroup=run.label))
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
    if v is None:
        return ""
    return json.dumps(v) if isinstance(v, bool) else f"{v:.4g}" if isinstance(v, float) else str(v)


def render_compare(runs: list[Run], plotly=True) -> str:
    figs = [_bars(runs), _cdfs(runs), _memory(runs)]
    parts = [to_html(f, full_html=False, include_plotlyjs=plotly if i == 0 else False, config={"responsive": True})
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
    if out.is_dir():
        raise ConfigError(args.out, "--out", "is a folder; give the HTML file to write, e.g. compare.html")
    try:
        from sim.outputs.plotlyjs import include

        write_atomic(out, render_compare(runs, include(getattr(args, "plotly", "inline"), out.parent)))
    except OSError as exc:
        raise ConfigError(args.out, "--out", f"cannot write: {exc.strerror or exc}") from None
    if not args.quiet:
        print_table(runs)
        print(f"wrote {out}")
    return 0

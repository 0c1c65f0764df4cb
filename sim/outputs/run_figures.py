"""The step and request figures of ``report.html`` (built from a run's whole step log).

Every trace is bounded whatever the run's length: timelines are binned to at most
``MAX_POINTS`` points (time-weighted means of consecutive steps), event markers and
running totals thinned to at most ``MAX_POINTS`` steps, and the request timeline shows
at most ``MAX_TIMELINE_REQUESTS`` evenly spaced finished requests.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.engine.logs.request_log import RequestLog
from sim.outputs.figures import MAX_POINTS, thin_indices

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


def _replicas_figure(logs: list[dict], pool: int | list[int], names: list[str] | None = None) -> go.Figure:
    """A cluster's replicas side by side: KV allocated (% of a replica's pool) and requests
    in each engine (running, waiting, swapped), binned like the other timelines. ``pool``:
    one size for all, or each replica's (disaggregated pools differ); ``names``: legend labels."""
    pools = pool if isinstance(pool, list) else [pool] * len(logs)  # disaggregation: per replica
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=("KV allocated (% of the replica's pool)",
                                        "requests in the engine (running + waiting + swapped)"))
    for i, steps in enumerate(logs):
        queued = steps["num_running"] + steps["num_waiting"] + steps["num_swapped"]
        tb, cols = _binned(steps["time_s"], steps["duration_s"],
                           {"kv": steps["kv_allocated_slots"] / pools[i] * 100, "load": queued})
        color = _PALETTE[i % len(_PALETTE)]
        fig.add_trace(go.Scatter(x=tb, y=cols["kv"], name=names[i] if names else f"replica {i}",
                                 legendgroup=str(i), line_color=color, hovertemplate="%{y:.1f}%"), 1, 1)
        fig.add_trace(go.Scatter(x=tb, y=cols["load"], name=f"replica {i}", legendgroup=str(i),
                                 showlegend=False, line_color=color), 2, 1)
    fig.update_yaxes(title_text="% of pool", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="requests", row=2, col=1, rangemode="tozero")
    fig.update_layout(title="Replicas: KV use and load (binned means)", xaxis2_title="simulated time (s)",
                      height=640, hovermode="x unified")
    return fig


_PALETTE = ("#1971c2", "#e03131", "#2b8a3e", "#f08c00", "#862e9c", "#0c8599", "#c2255c", "#5c940d",
            "#495057", "#364fc7")


def _events_figure(steps: dict, preemption_mode: str) -> go.Figure:
    """Preemptions and swap transfers, step by step (the steps where they happened)."""
    t, pre, swap = steps["time_s"], steps["num_preempted"], steps["swap_bytes"]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        specs=[[{"secondary_y": True}], [{"secondary_y": True}]],
                        subplot_titles=(f"preemptions (mode: {preemption_mode})",
                                        "swap traffic over PCIe (out + in)"))
    hit = np.flatnonzero(pre > 0)
    hit = hit[thin_indices(hit.size)] if hit.size else hit
    fig.add_trace(go.Scatter(x=t[hit], y=pre[hit], mode="markers", name="preempted in a step",
                             marker_color="#e03131"), 1, 1)
    idx = thin_indices(t.size)
    fig.add_trace(go.Scatter(x=t[idx], y=np.cumsum(pre)[idx] if t.size else [], name="preemptions so far",
                             line_shape="hv", line_color="#862e9c"), 1, 1, secondary_y=True)
    moved = np.flatnonzero(swap > 0)
    moved = moved[thin_indices(moved.size)] if moved.size else moved
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
    if isinstance(requests, RequestLog):  # a run's log: only the sampled requests become objects
        done = np.flatnonzero(~np.isnan(requests.columns(("finish_s",))["finish_s"]))
    else:
        done = np.array([i for i, r in enumerate(requests) if r.finish_s is not None], dtype=np.int64)
    if done.size > MAX_TIMELINE_REQUESTS:
        done = done[np.linspace(0, done.size - 1, MAX_TIMELINE_REQUESTS).astype(int)]
    sample = [requests[i] for i in done.tolist()]
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

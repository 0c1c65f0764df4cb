"""Plotly figures shared by the HTML pages (``report.html``, ``compare.html``, ``validation.html``).

``latency_cdf_figure``: TTFT, TPOT and E2E latency CDFs side by side, one curve per series
in each panel, a series keeping one colour across the panels. Long series are thinned to
at most ``MAX_POINTS`` drawn points per curve (evenly spaced ranks, min and max kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.engine.logs.request_stats import RunRequests

MAX_POINTS = 1500
PANEL_TITLES = ("TTFT", "TPOT", "E2E latency")
METRIC_NAMES = ("TTFT", "TPOT", "E2E")
COLORS = plotly.colors.qualitative.Plotly  # plotly's default colour sequence


def thin_indices(n: int, max_points: int = MAX_POINTS) -> np.ndarray:
    """At most ``max_points`` evenly spaced indices of ``n`` items, the first and last
    included."""
    if not n:
        return np.zeros(0, int)
    return np.unique(np.linspace(0, n - 1, min(n, max_points)).astype(int))


def run_colors(n: int) -> list[str]:
    """One distinct colour per series of a page (a run keeps it in every panel): plotly's
    default sequence, or evenly spaced hues past its ten colours."""
    if n <= len(COLORS):
        return list(COLORS[:n])
    return [f"hsl({int(i * 360 / n)},60%,45%)" for i in range(n)]


@dataclass(frozen=True)
class LatencySeries:
    """The latencies (seconds) of one set of finished requests: one curve per panel.

    ``label`` names the curves in the legend; None for a page's only series (then each
    curve is named by its metric and there is no legend). ``color`` None: the next colour
    of plotly's default sequence.
    """

    label: str | None
    ttft_s: Sequence[float]
    tpot_s: Sequence[float]
    e2e_s: Sequence[float]
    color: str | None = None

    @classmethod
    def of_requests(cls, requests, label: str | None = None, color: str | None = None) -> LatencySeries:
        """The series of ``requests``' finished ones (TPOT of those with two or more tokens)."""
        rr = RunRequests(requests)
        return cls(label, rr.done_ttft(), rr.done_tpot(), rr.done_e2e(), color)


def latency_cdf_figure(series: Sequence[LatencySeries], *, title: str = "Latency CDFs (finished requests)",
                       slo_s: Sequence[float | None] = (None, None, None), log_x: bool = True,
                       axis_toggle: bool = False, height: int | None = None) -> go.Figure:
    """TTFT, TPOT and E2E CDFs of every series. ``slo_s``: a limit per panel, drawn as a
    dashed red line marked "SLO" (None: no line). ``axis_toggle``: buttons that switch the
    x axes between log and linear."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=PANEL_TITLES)
    legend = any(s.label is not None for s in series)
    defaults = run_colors(len(series))
    for j, s in enumerate(series):
        color = s.color or defaults[j]
        first = True  # the series' legend entry: on its first drawn curve (a panel may be empty)
        for i, values in enumerate((s.ttft_s, s.tpot_s, s.e2e_s)):
            vals = np.sort(np.asarray(values, dtype=float))
            vals = vals[np.isfinite(vals)]
            if not vals.size:
                continue
            keep = thin_indices(vals.size)  # the extremes kept, at most MAX_POINTS points
            y = np.arange(1, vals.size + 1) / vals.size
            name = s.label if s.label is not None else METRIC_NAMES[i]
            fig.add_trace(go.Scatter(x=vals[keep], y=y[keep], mode="lines", name=name,
                                     legendgroup=s.label, showlegend=legend and first,
                                     line_color=color), 1, i + 1)
            first = False
    for i, limit in enumerate(slo_s):
        if limit is not None:
            fig.add_vline(x=limit, line_dash="dash", line_color="red", row=1, col=i + 1,
                          annotation_text="SLO", annotation_position="bottom right")
    fig.update_xaxes(title_text="seconds", type="log" if log_x else "linear")
    fig.update_yaxes(title_text="fraction of requests", range=[0, 1], row=1, col=1)
    fig.update_layout(title=title, showlegend=legend)
    if height is not None:
        fig.update_layout(height=height)
    if axis_toggle:
        axes = ("xaxis", "xaxis2", "xaxis3")
        fig.update_layout(updatemenus=[dict(
            type="buttons", direction="right", x=1.0, xanchor="right", y=1.25, yanchor="top", buttons=[
                dict(label=kind + " x axes", method="relayout", args=[{f"{a}.type": kind for a in axes}])
                for kind in ("log", "linear")])])
    return fig

"""The shared latency-CDF figure: one curve per series and panel, SLO lines, axes, thinning."""

from __future__ import annotations

import numpy as np

from sim.outputs.figures import MAX_POINTS, LatencySeries, latency_cdf_figure, run_colors
from sim.request import Request


def finished(request_id: int, arrival: float, first: float, last: float, n_out: int) -> Request:
    r = Request(request_id, arrival, ((request_id, 10),), n_out, n_out)
    r.first_token_s, r.last_token_s, r.finish_s = first, last, last
    r.num_output_tokens = n_out
    return r


def test_series_of_requests_skips_unfinished_and_single_token_tpot() -> None:
    reqs = [finished(0, 0.0, 0.5, 2.5, 5), finished(1, 1.0, 1.25, 1.25, 1),
            Request(2, 0.0, ((2, 10),), 4, 4)]  # never finished
    s = LatencySeries.of_requests(reqs, "run")
    assert s.label == "run" and s.color is None
    assert list(s.ttft_s) == [0.5, 0.25] and list(s.tpot_s) == [0.5] and list(s.e2e_s) == [2.5, 0.25]


def test_a_single_unlabelled_series_names_curves_by_metric_and_marks_the_slo() -> None:
    s = LatencySeries(None, [0.3, 0.1, 0.2], [0.01, 0.02], [1.0, 2.0, 3.0])
    fig = latency_cdf_figure([s], slo_s=(0.5, 0.05, None), axis_toggle=True)
    assert [t.name for t in fig.data] == ["TTFT", "TPOT", "E2E"]
    assert fig.layout.showlegend is False
    assert list(fig.data[0].x) == [0.1, 0.2, 0.3] and list(fig.data[0].y) == [1 / 3, 2 / 3, 1.0]
    assert [(sh.x0, sh.xref) for sh in fig.layout.shapes] == [(0.5, "x"), (0.05, "x2")]
    assert [a.text for a in fig.layout.annotations if a.text == "SLO"] == ["SLO", "SLO"]
    assert [fig.layout[a].type for a in ("xaxis", "xaxis2", "xaxis3")] == ["log"] * 3
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["log x axes", "linear x axes"]
    assert fig.layout.title.text == "Latency CDFs (finished requests)"


def test_labelled_series_share_a_legend_entry_and_a_colour_across_panels() -> None:
    a = LatencySeries("real", [0.1], [0.01], [1.0], "#1971c2")
    b = LatencySeries("simulated", [0.2], [], [2.0])
    fig = latency_cdf_figure([a, b], title="Open loop", log_x=False, height=420)
    assert [(t.name, t.legendgroup, t.showlegend) for t in fig.data] == [
        ("real", "real", True), ("real", "real", False), ("real", "real", False),
        ("simulated", "simulated", True), ("simulated", "simulated", False)]
    assert {t.line.color for t in fig.data[:3]} == {"#1971c2"}
    assert len({t.line.color for t in fig.data[3:]}) == 1 and fig.data[3].line.color != "#1971c2"
    assert fig.layout.showlegend is True and fig.layout.height == 420 and not fig.layout.shapes
    assert fig.layout.xaxis.type == "linear" and not fig.layout.updatemenus


def test_long_series_are_thinned() -> None:
    n = 10 * MAX_POINTS + 7
    s = LatencySeries(None, np.linspace(1, 2, n), [], [])
    (trace,) = latency_cdf_figure([s]).data
    assert MAX_POINTS <= len(trace.x) <= MAX_POINTS + 1
    assert np.all(np.diff(trace.x) > 0)


def test_run_colors_are_distinct_for_any_number_of_runs() -> None:
    for n in (1, 2, 10, 11, 25):
        colors = run_colors(n)
        assert len(colors) == n == len(set(colors))


def test_a_series_keeps_its_legend_entry_when_its_first_panel_is_empty() -> None:
    a = LatencySeries("no ttft", [], [0.01, 0.02], [1.0])
    b = LatencySeries("full", [0.1], [0.01], [1.0])
    fig = latency_cdf_figure([a, b])
    shown = [(t.name, t.showlegend) for t in fig.data]
    assert shown == [("no ttft", True), ("no ttft", False), ("full", True), ("full", False), ("full", False)]
    assert len({t.line.color for t in fig.data[:2]}) == 1 and fig.data[0].line.color != fig.data[2].line.color


def test_non_finite_latencies_are_not_drawn() -> None:
    s = LatencySeries(None, [0.1, float("nan"), float("inf"), 0.2], [], [])
    (trace,) = latency_cdf_figure([s]).data
    assert list(trace.x) == [0.1, 0.2] and list(trace.y) == [0.5, 1.0]

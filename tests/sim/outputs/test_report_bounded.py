"""report.html stays bounded however long the run: every trace of every figure has at most
MAX_POINTS points (the request timeline at most MAX_TIMELINE_REQUESTS requests)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sim.engine.logs.metrics import COLUMNS
from sim.outputs.figures import MAX_POINTS, LatencySeries, latency_cdf_figure, thin_indices
from sim.outputs.run_figures import (MAX_TIMELINE_REQUESTS, _events_figure, _load_figure,
                                     _memory_figure, _timeline_figure)


def _steps(n: int) -> dict:
    rng = np.random.default_rng(0)
    steps = {c: rng.integers(0, 50, n).astype(float) for c in COLUMNS}
    steps["time_s"] = np.cumsum(rng.random(n))
    steps["duration_s"] = rng.random(n)
    steps["kv_allocated_slots"] = steps["kv_token_slots"] + 60
    return steps


def _points(fig) -> list[int]:
    return [len(t.x) if t.x is not None else len(t.y) for t in fig.data]


@pytest.mark.parametrize("n", [10, MAX_POINTS + 1, 7 * MAX_POINTS + 13])
def test_step_figures_have_at_most_max_points_per_trace(n) -> None:
    steps = _steps(n)
    for fig in (_memory_figure(steps, 1000), _load_figure(steps), _events_figure(steps, "swap")):
        points = _points(fig)
        assert points and max(points) <= MAX_POINTS
        if n <= MAX_POINTS:
            assert max(points) == n  # short runs are drawn step by step


@pytest.mark.parametrize("n", [3, MAX_POINTS, MAX_POINTS + 1, 2 * MAX_POINTS - 1, 20 * MAX_POINTS + 3])
def test_cdf_curves_have_at_most_max_points_and_keep_the_extremes(n) -> None:
    values = np.linspace(1, 2, n)
    fig = latency_cdf_figure([LatencySeries(None, values, values, values)])
    for trace in fig.data:
        assert len(trace.x) == min(n, MAX_POINTS)
        assert trace.x[0] == 1 and trace.x[-1] == 2 and trace.y[-1] == 1


def test_thin_indices() -> None:
    assert thin_indices(0).size == 0 and thin_indices(4, 10).tolist() == [0, 1, 2, 3]
    idx = thin_indices(10**6, 100)
    assert idx.size == 100 and idx[0] == 0 and idx[-1] == 10**6 - 1


def test_the_request_timeline_shows_a_bounded_sample() -> None:
    reqs = [SimpleNamespace(request_id=i, num_preemptions=0, arrival_s=i, admitted_s=i + 0.1,
                            first_token_s=i + 0.2, last_token_s=i + 1.0, finish_s=i + 1.0)
            for i in range(5000)]
    fig = _timeline_figure(reqs)
    assert max(len(t.y) for t in fig.data) <= MAX_TIMELINE_REQUESTS

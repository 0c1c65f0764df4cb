"""Quiet steps (sim/engine/macro/quiet.py): the tight loop engages on most steps of a stretch, and
a run with it gives exactly what the general loop gives for the same steps (the loop turned into
one that advances nothing), with rows flushed inside it (a small ROWS_PER_FLUSH) or not."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim.engine.macro.quiet as quiet
import sim.engine.macro.run as macro
from sim.config.scenario import load_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation
from sim.outputs.files import requests_csv

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
#: A chat run (prefix caching, a front end, async scheduling's lag), the Azure trace (no prefix
#: caching, no front end), follow-up turns with a shared prompt cache.
CASES = {
    "chatbot.yaml": ["workload.num_requests=300"],
    "azure-conv.yaml": ["workload.duration_s=120"],
    "shared-prompt-cache.yaml": ["workload.num_requests=200"],
}


def _run(name: str, extra=()):
    sc = load_scenario(SCENARIOS / name, [*CASES[name], *extra])
    result = Simulation(sc).run()
    summary = summarize(result)
    summary.pop("sim_wall_s", None)
    return summary, requests_csv(result.requests), result.steps.table()


def _counting(monkeypatch) -> list[int]:
    """The steps each call of ``quiet_steps`` advanced, as the run goes."""
    advanced: list[int] = []
    original = quiet.quiet_steps

    def counting(run, b, k, *rest):
        out = original(run, b, k, *rest)
        advanced.append(out[0] - k)
        return out

    monkeypatch.setattr(macro, "quiet_steps", counting)
    return advanced


def _none(run, b, k, t, t_next, n, fast, allocated, cached_free, num_running, durations, doubles, counts,
          k_flushed):
    """A ``quiet_steps`` that advances nothing: the general loop takes every step."""
    return k, t, allocated, cached_free, doubles, counts, k_flushed, False


def _same(a, b) -> None:
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert a[2].shape == b[2].shape and (a[2] == b[2]).all()


@pytest.mark.parametrize("name", sorted(CASES))
def test_quiet_steps_give_exactly_the_general_loops_results(name, monkeypatch) -> None:
    advanced = _counting(monkeypatch)
    with_loop = _run(name)
    steps = len(with_loop[2])
    assert sum(advanced) > steps // 3, (sum(advanced), steps)  # it engages (not a speed assertion)
    monkeypatch.setattr(macro, "quiet_steps", _none)
    _same(with_loop, _run(name))


@pytest.mark.parametrize("name", ["chatbot.yaml", "azure-conv.yaml"])
def test_rows_flushed_inside_the_quiet_loop_change_nothing(name, monkeypatch) -> None:
    reference = _run(name)
    advanced = _counting(monkeypatch)
    monkeypatch.setattr(quiet, "ROWS_PER_FLUSH", 7)
    monkeypatch.setattr(macro, "ROWS_PER_FLUSH", 7)
    flushed = _run(name)
    assert max(advanced) > 7  # some quiet runs went through a flush
    _same(reference, flushed)

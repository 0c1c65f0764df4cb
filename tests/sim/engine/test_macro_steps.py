"""Macro-steps (sim/engine/macro/run.py) change nothing: every shipped scenario, stepped one by
one and in stretches, gives the same summary, the same requests and the same step log."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.config.scenario import load_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation
from sim.outputs.files import requests_csv

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
#: One engine each (a cluster's macro-steps: tests/sim/cluster/test_cluster_routing.py).
#: plan-*.yaml are `sim plan` files (sim/plan/spec.py), not scenarios.
SHIPPED = sorted(p.name for p in SCENARIOS.glob("*.yaml")
                 if not p.name.startswith("plan-") and load_scenario(p).cluster.num_replicas == 1
                 and load_scenario(p).engine.pipeline_parallel_size == 1)  # pipelines run no macro-steps (#15)


def _smaller(name: str) -> list[str]:
    """Keep the test quick: fewer arrivals (the full runs are checked by benchmarks/identical_outputs.py)."""
    data = load_scenario(SCENARIOS / name).workload
    if data.trace is not None:
        return ["workload.duration_s=240"]
    return [f"workload.num_requests={min(data.num_requests or 400, 400)}"]


def _run(name: str, macro: bool, extra=()):
    sc = load_scenario(SCENARIOS / name, [*_smaller(name), *extra])
    sim = Simulation(sc, macro_steps=macro)
    result = sim.run()
    summary = summarize(result)
    summary.pop("sim_wall_s", None)
    return sim, summary, requests_csv(result.requests), result.steps.table()


@pytest.mark.parametrize("name", SHIPPED)
def test_stretches_of_decodes_give_exactly_the_step_by_step_results(name) -> None:
    sim, summary, requests, steps = _run(name, macro=True)
    _, summary0, requests0, steps0 = _run(name, macro=False)
    assert summary == summary0
    assert requests == requests0
    assert steps.shape == steps0.shape and (steps == steps0).all()


@pytest.mark.parametrize("profile", ["vllm-v1", "vllm-v0", "sglang", "eager", "trtllm", "trtllm-per-query-head-kv",
                                     "vllm-v1-reserving"])
def test_every_profile_with_a_front_end_and_prefix_caching(profile) -> None:
    extra = [f"engine.profile={profile}"]
    if profile == "trtllm-per-query-head-kv":  # decode attention's reads times the query group
        extra = ["engine.profile=trtllm", "engine.profile_overrides.gqa_shared_kv_reads=false"]
    if profile == "vllm-v1-reserving":  # full-length admission with chunked prefill (trtllm's is unchunked)
        extra = ["engine.profile=vllm-v1", "engine.profile_overrides.reserve_full_length=true"]
    a = _run("chatbot.yaml", True, extra)
    b = _run("chatbot.yaml", False, extra)
    assert a[1] == b[1] and a[2] == b[2] and (a[3] == b[3]).all()


def _count_stretches(monkeypatch) -> list[int]:
    """The steps each call of the macro-steps' ``run`` advanced (0: none), as the run goes."""
    import sim.engine.macro.run as macro

    advanced: list[int] = []
    original = macro.DecodeRun.run

    def counting(self):
        done = yield from original(self)
        advanced.append(done)
        return done

    monkeypatch.setattr(macro.DecodeRun, "run", counting)
    return advanced


def test_most_steps_of_a_chat_run_are_advanced_in_stretches(monkeypatch) -> None:
    """Not a speed assertion: a count of how many steps the fast path took (it must engage)."""
    advanced = _count_stretches(monkeypatch)
    sim, _, _, steps = _run("chatbot.yaml", True)
    assert sum(advanced) > 0.3 * len(steps)


def test_only_steps_without_decodes_run_one_by_one_in_a_lone_engine(monkeypatch) -> None:
    """With no prefix caching and no preemption, a stretch goes on through arrivals (their
    prompts are admitted in it), finishing steps and waiting requests that cannot be
    admitted. The only steps left to the normal path are those with no decode to carry a
    stretch: an idle engine's first prompts."""
    from sim.engine.logs.step_log import COLUMNS

    advanced = _count_stretches(monkeypatch)
    sim, summary, _, steps = _run("azure-conv.yaml", True)
    assert summary["preemptions"]["recompute"] == summary["preemptions"]["swap"] == 0
    col = COLUMNS.index
    with_prompts = steps[:, col("num_prefill_tokens")] > 0
    no_decodes = steps[:, col("num_decode_tokens")] == 0
    assert int((steps[:, col("num_waiting")] > 0).sum()) > 0  # requests waited through stretches' steps
    assert int((with_prompts & ~no_decodes).sum()) > 500  # prompts admitted within stretches
    assert len(steps) - sum(advanced) == int((with_prompts & no_decodes).sum())

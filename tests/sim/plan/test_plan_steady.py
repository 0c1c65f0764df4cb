"""Steady state in the plan's search: probe lengths that grow with the rate, a warm-up that is
not judged, and the confirmation run that steps the answer down where it fails at length."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from sim.config.scenario import parse_scenario
from sim.engine.logs.request_stats import RunRequests
from sim.engine.simulation import Simulation
from sim.plan import search as search_mod
from sim.plan.confirm import confirm
from sim.plan.search import evaluate_config, judge
from sim.plan.spec import MAX_PROBE_REQUESTS, SearchSpec, load_plan


def test_probe_length_covers_the_minimum_duration_at_every_rate():
    s = SearchSpec(min_rate=1, max_rate=100, tolerance=0.05, num_requests=200, min_duration_s=60)
    assert s.probe_requests(1.0) == 200  # 60 arrivals: the floor holds
    assert s.probe_requests(10.0) == 600 and s.probe_requests(10.01) == math.ceil(600.6)
    assert s.probe_requests(10.0, 600) == 6000  # a confirmation's length
    assert s.probe_requests(1e9, 600) == MAX_PROBE_REQUESTS


def test_plan_files_get_the_steady_state_defaults_and_refuse_bad_values(tiny_plan, write_plan, assert_refused):
    del tiny_plan["search"]["min_duration_s"], tiny_plan["search"]["confirm_duration_s"]
    s = load_plan(write_plan(tiny_plan)).search
    assert (s.min_duration_s, s.warmup, s.confirm_duration_s) == (60.0, 0.1, 600.0)
    for key, value, message in (("warmup", 0.6, "search.warmup: got 0.6"),
                                ("min_duration_s", -1, "search.min_duration_s: got -1"),
                                ("confirm_duration_s", float("nan"), "search.confirm_duration_s: got nan")):
        bad = copy.deepcopy(tiny_plan)
        bad["search"][key] = value
        assert_refused(write_plan(bad, f"bad-{key}.yaml"), f"search.{key}", message)


def test_the_warm_up_is_not_judged_but_must_finish(tiny_plan, write_plan):
    spec = load_plan(write_plan(tiny_plan))
    data = copy.deepcopy(spec.configs[1].data)
    data["workload"]["arrival"]["rate"] = 40.0
    result = Simulation(parse_scenario(data, spec.configs[1].source)).run()
    rr = RunRequests(result.requests)
    everything, later = judge(result, spec.slo, 40.0), judge(result, spec.slo, 40.0, warmup=0.3)
    assert everything["judged"] == rr.n and later["judged"] == rr.n - int(0.3 * rr.n)
    assert later["completed"] == everything["completed"] == rr.num_done  # counted whole
    order = np.argsort(rr.c["arrival_s"], kind="stable")[int(0.3 * rr.n):]
    ttft = rr.ttft[order][rr.done[order]]
    assert later["ttft_s"] == pytest.approx(np.percentile(ttft, spec.slo.percentile))
    assert later["ttft_s"] != everything["ttft_s"]


def synthetic(short_limit: float, long_limit: float, is_long):
    """A verdict: short probes pass up to ``short_limit``, long ones (``is_long(rate, n)``) up
    to ``long_limit`` (a short probe is optimistic)."""
    calls = []

    def evaluate(rate, n):
        calls.append((rate, n))
        return {"rate": rate, "passed": rate <= (long_limit if is_long(rate, n) else short_limit),
                "num_requests": n}
    return evaluate, calls


@pytest.mark.parametrize("steady", [10.3, 12.45, 19.0])
def test_the_confirmation_searches_on_at_length_from_the_short_answer(steady):
    """Down where the short probes were optimistic, up where they were pessimistic, and two
    probes where they were right: a passing rate with a failing one within the tolerance."""
    s = SearchSpec(min_rate=1, max_rate=64, tolerance=0.05, num_requests=100, confirm_duration_s=600)
    evaluate, calls = synthetic(12.5, steady, lambda r, n: n >= 1000)
    best, probes = confirm(lambda r: evaluate(r, 5000), s, {"rate": 12.4, "passed": True})
    assert probes[0]["rate"] == 12.4 and probes[0]["passed"] == (steady >= 12.4)
    assert best["passed"] and best["rate"] <= steady
    failing = [p["rate"] for p in probes if not p["passed"]]
    assert min(failing) - best["rate"] <= 0.05 * best["rate"] * (1 + 1e-9) and min(failing) > steady
    if steady == 12.45:
        assert len(probes) == 2


def test_evaluate_config_reports_the_confirmed_rate_or_unreachable_at_steady_state(tiny_plan, write_plan, monkeypatch):
    tiny_plan["search"]["num_requests"] = 10  # lengths set by the durations: 2 s, 8 s (conftest)
    spec = load_plan(write_plan(tiny_plan))
    config = spec.configs[0]
    for long_limit in (25.0, 5.0):
        evaluate, calls = synthetic(40.0, long_limit, lambda r, n: n > spec.search.probe_requests(r))
        monkeypatch.setattr(search_mod, "probe", lambda data, source, rate, slo, unit, n, warmup, planned=None: {
            **evaluate(rate, n), "warmup": warmup})
        rec = evaluate_config(config, spec.slo, spec.search)
        c = rec["confirmation"]
        assert c["search_max_rate"] <= 40.0 and not c["passed_at_search_rate"] and c["duration_s"] == 8
        assert all(p["num_requests"] == spec.search.probe_requests(p["rate"]) for p in rec["probes"])
        assert all(p["num_requests"] == spec.search.probe_requests(p["rate"], 8) for p in c["probes"])
        assert all(p["warmup"] == spec.search.warmup for p in rec["probes"] + c["probes"])
        if long_limit == 25.0:
            assert rec["status"] == "feasible" and rec["max_rate"] == c["max_rate"] <= 25.0
            assert rec["at_max_rate"] is c["probes"][-1] or rec["at_max_rate"]["passed"]
        else:  # below min_rate (10) at length: unreachable, saying so
            assert rec["status"] == "slo-unreachable" and rec["max_rate"] is None
            assert "fails at steady state" in rec["reason"] and "min_rate 10" in rec["reason"]


def test_a_large_plan_says_how_much_simulation_it_is(tiny_plan, write_plan, capsys):
    from sim.plan.search import LARGE_PLAN, REQUESTS_PER_WORKER_S, search_max_rate, workload_note

    spec = load_plan(write_plan(tiny_plan))
    assert workload_note(spec, LARGE_PLAN, 2) is None
    note = workload_note(spec, 4096, 2)
    s = spec.search
    mid = (s.min_rate * s.max_rate) ** 0.5
    rates = [p["rate"] for p in search_max_rate(lambda r: {"rate": r, "passed": r <= mid}, s)[1]]
    requests = 4096 * (sum(s.probe_requests(r) for r in rates) + s.probe_requests(mid, s.confirm_duration_s))
    assert f"{4096 * len(rates):,} probes" in note and f"{requests:,} simulated requests" in note
    assert f"roughly {requests / REQUESTS_PER_WORKER_S / 2 / 3600:.1f} h with 2 workers" in note
    assert "\n" not in note


def test_sim_plan_prints_the_note_before_it_searches(tiny_plan, write_plan, tmp_path, capsys):
    from sim.cli.main import main

    tiny_plan["base"].update(model="llama-3-70b", gpu="l40s")  # nothing fits: every search is a memory plan
    tiny_plan["base"]["engine"] = {"profile": "eager", "max_model_len": 512}
    tiny_plan["space"] = {"scheduler.max_num_seqs": list(range(1, 203))}
    assert main(["plan", write_plan(tiny_plan), "--out", str(tmp_path / "big"), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("plan: 202 configurations to search: about ")
    assert "infeasible 202" in captured.out


def test_what_sim_run_refuses_at_start_is_infeasible_not_an_error(tiny_plan, write_plan):
    """vLLM V0's pipeline parallelism gives each virtual engine 1/pp of the pool: 48 blocks
    hold one 512-token request, 24 do not. The memory plan passes; the engine refuses."""
    tiny_plan["base"]["engine"] = {"profile": "vllm-v0", "max_model_len": 512, "num_gpu_blocks_override": 48,
                                   "pipeline_parallel_size": 2}
    tiny_plan["space"] = {"scheduler.max_num_seqs": [4]}
    spec = load_plan(write_plan(tiny_plan))
    rec = evaluate_config(spec.configs[0], spec.slo, spec.search)
    assert rec["status"] == "infeasible" and rec["probes"] == []
    assert "virtual engines" in rec["reason"] and "traceback" not in rec

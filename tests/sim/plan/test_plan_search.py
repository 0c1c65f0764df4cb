"""The search: infeasible configurations are reported without simulating; bracketing and
bisection find the threshold of a monotone verdict; on a tiny world the probes agree."""

from __future__ import annotations

import pytest

from sim.plan import search as search_mod
from sim.plan.runner import run_configs
from sim.plan.search import evaluate_config, search_max_rate
from sim.plan.spec import SearchSpec, load_plan


def verdicts(threshold):
    calls = []

    def evaluate(rate):
        calls.append(rate)
        return {"rate": rate, "passed": rate <= threshold}
    return evaluate, calls


@pytest.mark.parametrize("threshold", [0.7, 3.3, 17.0, 63.9])
def test_bracket_and_bisect_find_a_monotone_threshold(threshold):
    s = SearchSpec(min_rate=0.5, max_rate=64, tolerance=0.05, num_requests=100)
    evaluate, calls = verdicts(threshold)
    best, probes = search_max_rate(evaluate, s)
    assert best["passed"] and best["rate"] <= threshold
    assert threshold - best["rate"] <= 0.05 * best["rate"] + 1e-12
    assert [p["rate"] for p in probes] == calls and len(calls) <= 8 + 6


def test_search_edges():
    s = SearchSpec(min_rate=1, max_rate=10, tolerance=0.05, num_requests=100)
    best, probes = search_max_rate(verdicts(0.5)[0], s)
    assert best is None and len(probes) == 1  # fails at min_rate: unreachable
    best, probes = search_max_rate(verdicts(99)[0], s)
    assert best["rate"] == 10 and [p["rate"] for p in probes] == [1, 2, 4, 8, 10]  # capped at max_rate


def test_an_infeasible_configuration_is_reported_without_simulating(tiny_plan, write_plan, monkeypatch):
    tiny_plan["base"].update(model="llama-3-70b", gpu="l40s")
    tiny_plan["base"]["engine"] = {"profile": "eager", "max_model_len": 512}
    tiny_plan["space"] = {"engine.kv_dtype": ["bf16"]}
    spec = load_plan(write_plan(tiny_plan))

    def no_probe(*args, **kwargs):
        raise AssertionError("an infeasible configuration must not be simulated")

    monkeypatch.setattr(search_mod, "probe", no_probe)
    rec = evaluate_config(spec.configs[0], spec.slo, spec.search)
    assert rec["status"] == "infeasible" and rec["probes"] == [] and rec["max_rate"] is None
    assert "weights" in rec["reason"] and "\n" not in rec["reason"]


def test_a_slo_no_rate_meets_is_unreachable(tiny_plan, write_plan):
    tiny_plan["slo"]["ttft_s"] = 1e-6
    spec = load_plan(write_plan(tiny_plan))
    rec = evaluate_config(spec.configs[0], spec.slo, spec.search)
    assert rec["status"] == "slo-unreachable" and len(rec["probes"]) == 1 and "min_rate 10" in rec["reason"]


def test_the_tiny_world_search_is_monotone_consistent(tiny_plan, write_plan):
    spec = load_plan(write_plan(tiny_plan))
    recs = run_configs(spec, workers=1)
    assert [r["status"] for r in recs] == ["feasible", "feasible"]
    for rec in recs:
        probes, best = rec["probes"], rec["max_rate"]
        assert rec["at_max_rate"]["passed"]
        # every probe at or below the max rate passed, every probe above it failed
        assert all(p["passed"] == (p["rate"] <= best) for p in probes)
        above = min(p["rate"] for p in probes if p["rate"] > best)
        assert above - best <= spec.search.tolerance * best
        assert all(p["in_flight"] == 0 for p in probes)
    # a larger batch (max_num_seqs 16 against 4) sustains at least the same rate
    assert recs[1]["max_rate"] >= recs[0]["max_rate"]


def test_a_p95_slo_is_judged_on_the_p95_summary_json_reports(tiny_plan, write_plan):
    """``slo.percentile: 95`` reads the 95th percentile itself, the one summary.json now has."""
    import copy

    from sim.config.scenario import parse_scenario
    from sim.engine.logs.metrics import summarize
    from sim.engine.simulation import Simulation
    from sim.plan.search import probe

    tiny_plan["slo"]["percentile"] = 95
    spec = load_plan(write_plan(tiny_plan))
    c = spec.configs[1]
    p = probe(c.data, c.source, 40.0, spec.slo)
    d = copy.deepcopy(c.data)
    d["workload"]["arrival"]["rate"] = 40.0
    s = summarize(Simulation(parse_scenario(d, c.source)).run())
    assert p["ttft_s"] == pytest.approx(s["ttft_s"]["p95"]) and p["tpot_s"] == pytest.approx(s["tpot_s"]["p95"])
    assert s["ttft_s"]["p90"] < p["ttft_s"] < s["ttft_s"]["p99"]  # not p90's or p99's


def test_a_configuration_plans_its_memory_once_for_all_its_probes(tiny_plan, write_plan, monkeypatch):
    from sim.engine import parts

    spec = load_plan(write_plan(tiny_plan))
    calls, real = [], parts.plan_memory
    monkeypatch.setattr(parts, "plan_memory", lambda *a, **k: calls.append(1) or real(*a, **k))
    rec = evaluate_config(spec.configs[0], spec.slo, spec.search)
    assert rec["num_probes"] >= 2 and len(calls) == 1  # the rate does not change the memory plan

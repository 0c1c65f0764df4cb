"""Bracket reuse: the warm search (from a neighbour's answer) keeps the cold search's
guarantee, and on the tiny world it gives the cold answer within the tolerance in fewer
probes; chains run along a pool key only."""

from __future__ import annotations

import copy

import pytest

from sim.plan.reuse import chains, pool_key, search_from
from sim.plan.runner import run_configs, run_plan
from sim.plan.search import cold_probe_estimate, search_max_rate
from sim.plan.spec import SearchSpec, load_plan
from sim.sweep.executors import ExecutorKind, make_executor

S = SearchSpec(min_rate=0.5, max_rate=64, tolerance=0.05, num_requests=100)


def verdicts(threshold):
    calls = []

    def evaluate(rate):
        calls.append(rate)
        return {"rate": rate, "passed": rate <= threshold}
    return evaluate, calls


@pytest.mark.parametrize("threshold", [0.7, 3.3, 17.0, 40.0, 63.9])
@pytest.mark.parametrize("start", [0.5, 2.0, 16.9, 17.0, 30.0, 64.0, 100.0])
def test_the_warm_search_finds_the_cold_answer_within_the_tolerance(threshold, start):
    evaluate, calls = verdicts(threshold)
    best, probes = search_from(evaluate, S, start)
    cold, _ = search_max_rate(verdicts(threshold)[0], S)
    assert best["passed"] and best["rate"] <= threshold
    assert threshold - best["rate"] <= S.tolerance * best["rate"] * (1 + 1e-9)
    assert abs(best["rate"] - cold["rate"]) <= S.tolerance * max(best["rate"], cold["rate"])
    assert [p["rate"] for p in probes] == calls
    assert all(S.min_rate <= r <= S.max_rate for r in calls)
    failing_above = [p["rate"] for p in probes if not p["passed"] and p["rate"] > best["rate"]]
    assert min(failing_above) - best["rate"] <= S.tolerance * best["rate"] * (1 + 1e-9)


def test_warm_search_edges():
    best, probes = search_from(verdicts(0.3)[0], S, 10.0)
    assert best is None and probes[-1]["rate"] == S.min_rate and not probes[-1]["passed"]  # unreachable
    best, probes = search_from(verdicts(99)[0], S, 40.0)
    assert best["rate"] == S.max_rate  # capped, as cold
    best, probes = search_from(verdicts(99)[0], S, 64.0)
    assert best["rate"] == S.max_rate and len(probes) == 1


def test_a_start_at_the_answer_costs_two_probes_where_the_cold_search_costs_many():
    threshold = 17.0
    cold, cold_probes = search_max_rate(verdicts(threshold)[0], S)
    best, probes = search_from(verdicts(threshold)[0], S, cold["rate"])
    assert best["rate"] == cold["rate"] and len(probes) == 2 and len(cold_probes) >= 8
    assert cold_probe_estimate(S, cold["rate"]) == len(cold_probes)
    assert cold_probe_estimate(S, None) == 1


def _plan(tiny_plan, write_plan, reuse=True, blocks=(32, 64, 128)):
    tiny_plan = copy.deepcopy(tiny_plan)
    tiny_plan["base"]["engine"].pop("num_gpu_blocks_override")
    tiny_plan["space"] = {"scheduler.max_num_seqs": [4, 16], "engine.num_gpu_blocks_override": list(blocks)}
    tiny_plan["search"]["reuse"] = reuse
    # probes of one fixed length and no confirmation run: the reuse guarantee is about one
    # verdict function of the rate (a length growing with the rate makes the verdict another
    # function at every rate, and a tiny plan's verdicts are noisy enough to cross back)
    tiny_plan["search"].update(min_duration_s=0, confirm_duration_s=0)
    return load_plan(write_plan(tiny_plan, f"plan-{reuse}.yaml"))


def test_chains_run_along_the_pool_key_smallest_pool_first(tiny_plan, write_plan):
    spec = _plan(tiny_plan, write_plan)
    key = pool_key(spec.keys, spec.configs)
    assert key == "engine.num_gpu_blocks_override"
    wave, neighbour = chains(spec.keys, spec.configs, key)
    # space order: max_num_seqs slowest; blocks 32, 64, 128 fastest
    assert [wave[i] for i in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [neighbour[i] for i in range(6)] == [None, 0, 1, None, 3, 4]
    tiny_plan["space"] = {"scheduler.max_num_seqs": [4, 16]}  # no pool key: one wave, no chains
    spec = load_plan(write_plan(tiny_plan))
    assert pool_key(spec.keys, spec.configs) is None
    assert set(chains(spec.keys, spec.configs, None)[0].values()) == {0}


def test_reuse_gives_the_cold_answers_within_the_tolerance_in_fewer_probes(tiny_plan, write_plan):
    warm = run_plan(_plan(tiny_plan, write_plan, True), make_executor(ExecutorKind.LOCAL, 1))
    cold = run_plan(_plan(tiny_plan, write_plan, False), make_executor(ExecutorKind.LOCAL, 1))
    tol = 0.05
    for w, c in zip(warm.records, cold.records):
        assert w["status"] == c["status"] == "feasible"
        assert abs(w["max_rate"] - c["max_rate"]) <= tol * max(w["max_rate"], c["max_rate"])
        assert w["num_probes"] == len(w["probes"]) and w["at_max_rate"]["passed"]
        assert c["start_rate"] is None and c["reused_from"] is None
    by = {r["index"]: r for r in warm.records}
    for r in warm.records:  # every larger pool started from its neighbour's answer
        if r["values"]["engine.num_gpu_blocks_override"] == 32:
            assert r["start_rate"] is None and r["probes_saved_estimate"] is None
        else:
            n = by[r["reused_from"]]
            assert n["values"]["engine.num_gpu_blocks_override"] < r["values"]["engine.num_gpu_blocks_override"]
            assert r["start_rate"] == n["max_rate"] == r["probes"][0]["rate"]
    assert warm.stats["warm_started"] == 4 and cold.stats["warm_started"] == 0
    assert warm.stats["reuse_key"] == "engine.num_gpu_blocks_override" and cold.stats["reuse_key"] is None
    assert warm.stats["run"] == sum(r["num_probes"] for r in warm.records) < cold.stats["run"]
    assert warm.stats["saved_estimate"] > 0
    # the estimate is the cold search's probe count on a verdict switching at each answer
    for r in warm.records:
        if r["start_rate"] is not None:
            assert r["probes_saved_estimate"] == cold_probe_estimate(warm_spec_search(tiny_plan), r["max_rate"]) \
                - r["num_probes"]


def warm_spec_search(tiny_plan):
    s = tiny_plan["search"]
    return SearchSpec(s["min_rate"], s["max_rate"], s["tolerance"], s["num_requests"])


def test_run_configs_keeps_its_workers_signature(tiny_plan, write_plan):
    spec = _plan(tiny_plan, write_plan, blocks=(64,))
    assert [r["status"] for r in run_configs(spec, workers=1)] == ["feasible", "feasible"]

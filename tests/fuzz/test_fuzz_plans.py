"""Random small plans through ``sim plan``: each is refused with one error line (exit 2) or
exits 0 with every configuration searched to a verdict (never ``error``), and every probe
of every search, confirmations too, accounted: completed + rejected + in flight = its
requests; a feasible configuration's answer drained with nothing in flight. The base
scenarios are the conservation fuzz's (single engines, replicas behind routers,
disaggregated pools, pipeline stages, five profiles, small pools, offload tiers)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fuzzkit import run_cli, write_yaml
from test_fuzz_conservation import scenarios

TRIED: Counter = Counter()


@st.composite
def plans(draw) -> dict:
    base = draw(scenarios())
    base["workload"].pop("num_requests", None)
    if base["workload"]["arrival"]["type"] == "offline":  # a plan searches an arrival rate
        base["workload"]["arrival"] = {"type": "poisson", "rate": 1.0}
    key, values = draw(st.sampled_from([
        ("scheduler.max_num_seqs", [8, 64]),
        ("engine.num_gpu_blocks_override", [300, 800]),
        ("engine.gpu_memory_utilization", [0.5, 0.9]),
        ("kv.block_size", [16]),
    ]))
    return {
        "name": "fuzz-plan", "base": base,
        "slo": {"ttft_s": draw(st.sampled_from([0.5, 2.0])), "tpot_s": draw(st.sampled_from([0.03, 0.1])),
                "percentile": draw(st.sampled_from([50, 95])), "attainment": 0.9},
        "target_rate": 10,
        "space": {key: values[:draw(st.integers(1, len(values)))]},
        "search": {"min_rate": 1, "max_rate": draw(st.sampled_from([4, 32])), "tolerance": 0.25,
                   "num_requests": draw(st.integers(10, 25)), "min_duration_s": draw(st.sampled_from([0, 2])),
                   "warmup": draw(st.sampled_from([0, 0.2])), "confirm_duration_s": draw(st.sampled_from([0, 4]))},
    }


def _accounted(p: dict) -> None:
    assert p["completed"] + p["rejected"] + p["in_flight"] == p["num_requests"], p
    assert 0 <= p["judged"] <= p["num_requests"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(plan=plans())
def test_every_plan_searches_to_a_verdict_with_every_probe_accounted(plan, tmp_path_factory, capsys) -> None:
    tmp = tmp_path_factory.mktemp("plan")
    path = write_yaml(tmp / "plan.yaml", plan)
    code, _ = run_cli(capsys, ["plan", str(path), "--out", str(tmp / "out"), "--workers", "1", "--quiet"],
                      "conservation: plan")
    if code == 2:  # one error line (run_cli checks it)
        TRIED["refused"] += 1
        return
    doc = json.loads((tmp / "out" / "plan.json").read_text())
    for c in doc["configurations"]:
        TRIED[c["status"]] += 1
        assert c["status"] in ("feasible", "slo-unreachable", "infeasible"), (c["status"], c.get("reason"))
        probes = c["probes"] + (c.get("confirmation") or {}).get("probes", [])
        for p in probes:
            _accounted(p)
        if c["status"] == "feasible":
            at = c["at_max_rate"]
            assert at["passed"] and at["in_flight"] == 0 and at["rejected"] == 0 and at["rate"] == c["max_rate"]
        elif c["status"] == "infeasible":
            assert probes == [] and c["reason"]
        else:
            assert c["reason"] and "\n" not in c["reason"]


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    yield
    print(f"\nplan fuzz: {dict(TRIED)}")

"""Plans over units (sim/plan/unit.py): cluster keys in the space, a unit simulated whole,
its GPUs and costs, bracket reuse across units, the reasons, and bad cluster values."""

from __future__ import annotations

import copy
import csv
import io
import json
import math

import pytest

from sim.cli.main import main
from sim.errors import ConfigError
from sim.plan.results import add_costs, finish
from sim.plan.reuse import neighbours, pool_key
from sim.plan.search import evaluate_config, probe
from sim.plan.spec import load_plan

LINK = {"bandwidth_gbps": 400, "latency_s": 0.0005}
SPLIT_1_3 = {"prefill_replicas": 1, "decode_replicas": 3, "kv_transfer": LINK}


@pytest.fixture
def unit_plan(tiny_plan):
    """The tiny plan (tiny-llama, 64 blocks) with prefix caching and a shared prefix: a unit
    of 2 replicas against one replica, round-robin against prefix-aware."""
    tiny_plan["base"]["kv"]["prefix_caching"] = True
    tiny_plan["base"]["workload"]["shared_prefix"] = {"num_prefixes": 8, "prefix_tokens": 64, "zipf_a": 0.8}
    tiny_plan["space"] = {"cluster.num_replicas": [1, 2], "cluster.router": ["round-robin", "prefix-aware"]}
    tiny_plan["search"].update(num_requests=120)
    return tiny_plan


def test_cluster_keys_make_units_with_their_gpus(tiny_plan, write_plan):
    tiny_plan["base"].update(model="llama-3-8b")
    tiny_plan["base"]["engine"].pop("num_gpu_blocks_override")
    split = {**SPLIT_1_3, "decode": {"engine": {"tensor_parallel_size": 2}}}
    tiny_plan["space"] = {"engine.tensor_parallel_size": [1, 2], "cluster": [{"num_replicas": 1},
                          {"num_replicas": 4, "router": "least-kv"}, {"disaggregation": split}]}
    spec = load_plan(write_plan(tiny_plan))
    assert spec.clustered
    shapes = [(c.values["engine.tensor_parallel_size"], c.unit) for c in spec.configs]
    assert [(tp, u["num_replicas"], u["router"], u["prefill_replicas"], u["gpus"]) for tp, u in shapes] == [
        (1, 1, None, None, 1), (1, 4, "least-kv", None, 4), (1, 4, "round-robin", 1, 1 + 3 * 2),
        (2, 1, None, None, 2), (2, 4, "least-kv", None, 8), (2, 4, "round-robin", 1, 2 + 3 * 2)]
    # a plan without cluster keys (nor replicas in its base) has no units at all
    tiny_plan["space"] = {"engine.tensor_parallel_size": [1, 2]}
    plain = load_plan(write_plan(tiny_plan))
    assert not plain.clustered and all(c.unit is None for c in plain.configs)


def test_a_plan_may_search_the_cache_aware_routers_keys(tiny_plan, write_plan):
    tiny_plan["space"] = {"cluster.num_replicas": [2], "cluster.router": ["cache-aware"],
                          "cluster.cache_threshold": [0.3, 0.6], "cluster.balance_abs_threshold": [8]}
    spec = load_plan(write_plan(tiny_plan))
    assert [(c.values["cluster.cache_threshold"], c.unit["router"]) for c in spec.configs] == [
        (0.3, "cache-aware"), (0.6, "cache-aware")]


BAD = [
    ({"cluster.num_replicas": [2], "cluster.router": ["round-robin", "random"]},
     "space.cluster.router: value \"random\": Input should be 'round-robin'"),
    ({"cluster.num_replicas": [4], "cluster.disaggregation": [{**SPLIT_1_3, "decode_replicas": 2}]},
     "space.cluster.disaggregation: value {"),
    ({"cluster.disaggregation": [None, {"prefill_replicas": 1, "decode_replicas": 3}]},
     "space.cluster.disaggregation: value {\"prefill_replicas\": 1, \"decode_replicas\": 3}: a 1:3 prefill:decode "
     "split needs kv_transfer"),
    ({"cluster.disaggregation.prefill_replicas": [1, 2]}, "space.cluster.disaggregation.prefill_replicas: value 1: "
     "cluster.disaggregation.decode_replicas: required key is missing"),
    ({"cluster": [{"num_replicas": 2, "router": "nope"}]}, "space.cluster: value {"),
    ({"cluster.colour": [1]}, "space.cluster.colour: a plan searches cluster, cluster.num_replicas"),
    ({"cluster.num_replicas": [2], "engine.pipeline_parallel_size": [2], "engine.pipeline_mode": ["virtual-engines"]},
     "space.cluster.num_replicas: value 2: 2 replicas of a pipeline-parallel engine in vLLM V0's form"),
]


@pytest.mark.parametrize("space, message", BAD, ids=[m[:48] for _, m in BAD])
def test_bad_cluster_values_are_one_error_line_naming_the_plan_and_key(tiny_plan, write_plan, assert_refused,
                                                                       space, message):
    tiny_plan["space"] = space
    assert_refused(write_plan(tiny_plan), "space.cluster", message)


def test_a_sum_disagreeing_with_num_replicas_says_so(tiny_plan, write_plan):
    tiny_plan["space"] = {"cluster.num_replicas": [4], "cluster.disaggregation": [{**SPLIT_1_3, "decode_replicas": 2}]}
    with pytest.raises(ConfigError) as err:
        load_plan(write_plan(tiny_plan))
    assert "num_replicas 4 is not prefill_replicas + decode_replicas (1 + 2)" in err.value.message


def test_a_unit_probe_simulates_every_replica_as_sim_run_does(unit_plan, write_plan):
    from sim.config.scenario import parse_scenario
    from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster

    spec = load_plan(write_plan(unit_plan))
    unit = next(c for c in spec.configs if c.unit["num_replicas"] == 2 and c.unit["router"] == "prefix-aware")
    p = probe(unit.data, unit.source, 40.0, spec.slo, unit=True)
    d = copy.deepcopy(unit.data)
    d["workload"]["arrival"]["rate"] = 40.0
    summary = summarize_cluster(ClusterSimulation(parse_scenario(d, unit.source)).run())
    reqs = summary["requests"]
    assert reqs["arrived"] == 120 == reqs["completed"] + reqs["rejected"] + reqs["in_flight"]
    assert p["completed"] == reqs["completed"] and p["rejected"] == reqs["rejected"] and p["in_flight"] == 0
    assert p["ttft_s"] == pytest.approx(summary["ttft_s"]["p90"])  # the plan's percentile: 90
    assert p["tpot_s"] == pytest.approx(summary["tpot_s"]["p90"])
    assert p["prefix_cache_hit_rate"] == pytest.approx(summary["kv"]["prefix_cache_hit_rate"])
    assert sum(r["requests"]["arrived"] for r in summary["replicas"]) == 120
    one = next(c for c in spec.configs if c.unit["num_replicas"] == 1)
    single = probe(one.data, one.source, 40.0, spec.slo, unit=True)
    assert single["ttft_s"] != p["ttft_s"]  # two replicas share the load: not one engine's figures


def test_units_are_costed_per_unit(unit_plan, write_plan):
    spec = load_plan(write_plan(unit_plan))
    c = next(c for c in spec.configs if c.unit["num_replicas"] == 2)
    rec = evaluate_config(c, spec.slo, spec.search)
    assert rec["unit"] == c.unit and rec["status"] == "feasible"
    costed = add_costs(spec, rec)
    units = math.ceil(spec.target_rate / rec["max_rate"] - 1e-9)
    assert costed["units"] == units and costed["replicas"] == 2 * units and costed["gpus"] == 2 * units
    assert costed["gpus_per_unit"] == 2
    assert costed["cost_per_hour"] == pytest.approx(costed["gpus"] * c.price_per_gpu_hour)


def test_units_start_from_their_one_replica_twin_and_never_across_routers(unit_plan, write_plan):
    unit_plan["space"]["engine.gpu_memory_utilization"] = [0.5, 0.9]
    unit_plan["base"]["engine"].pop("num_gpu_blocks_override")
    spec = load_plan(write_plan(unit_plan))
    key = pool_key(spec.keys, spec.configs)
    wave, neighbour, scale = neighbours(spec.keys, spec.configs, key)
    by = {c.index: c for c in spec.configs}
    for c in spec.configs:
        n = neighbour[c.index]
        if n is None:
            assert wave[c.index] == 0
            continue
        m = by[n]
        assert wave[c.index] == wave[n] + 1
        if scale[c.index] == 1:  # a smaller pool of the same unit: the same router and replicas
            assert m.unit == c.unit and m.values[key] < c.values[key]
        else:  # the chain head of a unit: its one-replica twin at the same pool size
            assert scale[c.index] == c.unit["num_replicas"] == 2 and m.unit["num_replicas"] == 1
            assert m.values[key] == c.values[key] == 0.5
    heads = [c for c in spec.configs if c.unit["num_replicas"] == 2 and c.values[key] == 0.5]
    assert len(heads) == 2 and all(scale[c.index] == 2 for c in heads)
    # a split unit has no twin: it starts cold
    unit_plan["space"] = {"cluster": [{"num_replicas": 1}, {"disaggregation": SPLIT_1_3}]}
    spec = load_plan(write_plan(unit_plan))
    assert neighbours(spec.keys, spec.configs, None)[1] == {0: None, 1: None}


@pytest.fixture
def planned_units(unit_plan, write_plan, tmp_path):
    unit_plan["space"] = {"cluster": [{"num_replicas": 1}, {"num_replicas": 2, "router": "round-robin"},
                                      {"num_replicas": 2, "router": "prefix-aware"},
                                      {"router": "round-robin", "disaggregation": {**SPLIT_1_3, "decode_replicas": 1}}]}
    path = write_plan(unit_plan)
    out = tmp_path / "out"
    assert main(["plan", path, "--out", str(out), "--workers", "2", "--quiet"]) == 0
    return path, out, json.loads((out / "plan.json").read_text())


def test_a_unit_plan_end_to_end(planned_units):
    path, out, doc = planned_units
    confs = {c["index"]: c for c in doc["configurations"]}
    assert doc["probes"]["warm_from_one_replica"] == 2
    one = confs[0]
    for i in (1, 2):  # started at 2 x the one-replica max rate (within the search's bounds)
        assert confs[i]["reused_from"] == 0 and confs[i]["start_scale"] == 2
        assert confs[i]["start_rate"] == pytest.approx(min(2 * one["max_rate"], 1000))
        assert confs[i]["probes"][0]["rate"] == confs[i]["start_rate"]
    assert confs[3]["start_rate"] is None and confs[3]["unit"]["prefill_replicas"] == 1
    assert set(confs[3]["memory"]["pools"]) == {"prefill", "decode"}
    for c in confs.values():
        for p in c["probes"]:
            assert p["completed"] + p["rejected"] + p["in_flight"] == p["num_requests"] >= 120
            assert p["prefix_cache_hit_rate"] is not None
        if c["status"] == "feasible":
            assert c["gpus"] == c["units"] * c["unit"]["gpus"] == c["units"] * c["unit"]["num_replicas"]
            assert c["why"].startswith(("one replica", "a 2-replica unit", "a 1:1 prefill:decode unit"))
    assert "perfect router" not in json.dumps(doc["assumptions"]) and "simulated whole" in doc["assumptions"][0]
    rows = list(csv.DictReader(io.StringIO((out / "plan.csv").read_text())))
    by_index = {int(r["index"]): r for r in rows}
    assert by_index[2]["router"] == "prefix-aware" and by_index[2]["replicas_per_unit"] == "2"
    assert by_index[3]["pd_split"] == "1:1" and by_index[0]["pd_split"] == "" and by_index[0]["router"] == ""
    assert by_index[3]["gpus_per_unit"] == "2"
    page = (out / "plan.html").read_text()
    assert "<th>P:D</th>" in page and "<th>GPUs/unit</th>" in page and "max rate per unit" in page
    assert "P:D 1:1, round-robin" in page and "2 x prefix-aware" in page  # the cluster chart's categories
    # --resume over a finished unit plan writes the same configurations
    assert main(["plan", path, "--out", str(out), "--quiet", "--resume"]) == 0
    again = json.loads((out / "plan.json").read_text())
    assert again["configurations"] == doc["configurations"] and again["probes"] == doc["probes"]


def _rec(index, cluster, router, n, rate, hit, split=None, status="feasible"):
    unit = {"num_replicas": n, "router": router, "prefill_replicas": split and split[0],
            "decode_replicas": split and split[1], "gpus": n}
    return {"index": index, "values": {"gpu": "a100-80gb", "cluster": cluster}, "gpu": "a100-80gb",
            "tensor_parallel_size": 1, "gpus_per_replica": 1, "status": status, "reason": "x",
            "max_rate": rate, "capped": False, "unit": unit,
            "memory": {"kv_pool_tokens": 1000, "max_full_length_requests": 3},
            "at_max_rate": None if status != "feasible" else {
                "ttft_s": 0.2, "tpot_s": 0.04, "attainment": 0.97, "mean_output_tokens": 100.0,
                "prefix_cache_hit_rate": hit}}


def test_the_reasons_compare_routers_splits_and_one_replica(tiny_plan, write_plan):
    tiny_plan["space"] = {"cluster.num_replicas": [1, 4]}
    spec = load_plan(write_plan(tiny_plan))
    recs = [_rec(0, "one", None, 1, 2.0, 0.5), _rec(1, "rr", "round-robin", 8, 10.0, 0.09),
            _rec(2, "pa", "prefix-aware", 8, 14.0, 0.62), _rec(3, "lo", "least-outstanding", 8, None, None,
                                                                 status="slo-unreachable"),
            _rec(4, "pd", "prefix-aware", 8, 7.0, 0.5, split=(2, 6))]
    why = {r["index"]: r["why"] for r in finish(spec, recs)}
    assert ("prefix-aware routing in an 8-replica unit raises the max rate 1.40x against round-robin "
            "(prefix cache hit rate 62% vs 9%)") in why[2]
    assert "one pool of 8 raises the max rate 2.00x against the best prefill:decode split (2:6)" in why[2]
    assert "per GPU the unit sustains 0.88x one replica's max rate (1.75 vs 2.00 req/s per GPU)" in why[2]
    assert "round-robin routing in an 8-replica unit lowers the max rate 0.71x against prefix-aware" in why[1]
    assert why[3].startswith("slo-unreachable")
    assert "a 2:6 prefill:decode split lowers the max rate 0.50x against one pool of 8 (prefix-aware)" in why[4]
    assert why[0].startswith("one replica; KV pool holds 3")

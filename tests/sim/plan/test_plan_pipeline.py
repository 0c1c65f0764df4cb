"""Plans over pipeline-parallel engines (#15/#16): units of replicas of a batch-queue
pipeline-parallel engine (Llama-3-70B on H100 SXM as TP 4 x PP 2) are simulated as `sim run`
runs them, costed at replicas x TP x PP GPUs; what the engine refuses is one error line."""

from __future__ import annotations

import copy
import json
import math

import pytest

from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.engine.pipeline.simulation import PipelineSimulation
from sim.engine.pipeline.batch_queue import BatchQueueSimulation
from sim.engine.pipeline.cluster import PipelineCluster
from sim.engine.pipeline.summary import summarize_pipeline
from sim.plan.search import probe
from sim.plan.spec import load_plan

PP_PLAN = {
    "name": "pp-units",
    "base": {
        "name": "pp70b", "seed": 7, "model": "llama-3-70b", "gpu": "h100-sxm",
        "engine": {"profile": "vllm-v1", "tensor_parallel_size": 4, "pipeline_parallel_size": 2,
                   "max_model_len": 2048},
        "kv": {"allocator": "paged", "block_size": 16},
        "scheduler": {"max_num_seqs": 32},
        "workload": {"arrival": {"type": "poisson", "rate": 1},
                     "prompt_tokens": {"type": "uniform", "low": 50, "high": 300},
                     "output_tokens": {"type": "uniform", "low": 10, "high": 150}},
    },
    "slo": {"ttft_s": 0.5, "tpot_s": 0.03, "percentile": 90, "attainment": 0.9},
    "target_rate": 60,
    "space": {"cluster.num_replicas": [1, 2]},
    "search": {"min_rate": 4, "max_rate": 128, "tolerance": 0.1, "num_requests": 100,
               "min_duration_s": 4, "confirm_duration_s": 15},
}
RATE = 30.0  # a probe's rate: well loaded for one replica


@pytest.fixture
def pp_plan():
    return copy.deepcopy(PP_PLAN)


def _sim_run(config, rate: float):
    """What `sim run` builds and summarizes for ``config`` at ``rate``."""
    d = copy.deepcopy(config.data)
    d["workload"]["arrival"]["rate"] = rate
    sim = PipelineSimulation(parse_scenario(d, config.source))
    return sim, summarize_pipeline(sim.run())


def test_pipeline_units_load_with_replicas_x_tp_x_pp_gpus(pp_plan, write_plan):
    spec = load_plan(write_plan(pp_plan))
    assert spec.clustered
    assert [(c.unit["num_replicas"], c.unit["router"], c.unit["gpus"]) for c in spec.configs] == [
        (1, None, 1 * 4 * 2), (2, "round-robin", 2 * 4 * 2)]
    assert all((c.tensor_parallel_size, c.pipeline_parallel_size) == (4, 2) for c in spec.configs)


def test_a_pipeline_unit_probe_runs_the_engine_sim_run_runs(pp_plan, write_plan):
    spec = load_plan(write_plan(pp_plan))
    one, two = spec.configs
    sim, summary = _sim_run(two, RATE)
    assert isinstance(sim, PipelineCluster) and len(sim.replicas) == 2
    p = probe(two.data, two.source, RATE, spec.slo, unit=True)
    reqs = summary["requests"]
    n = spec.search.num_requests
    assert reqs["arrived"] == n == reqs["completed"] + reqs["rejected"] + reqs["in_flight"]
    assert p["completed"] + p["rejected"] + p["in_flight"] == n
    assert (p["completed"], p["rejected"], p["in_flight"]) == (reqs["completed"], reqs["rejected"], 0)
    assert p["ttft_s"] == pytest.approx(summary["ttft_s"]["p90"])  # the plan's percentile: 90
    assert p["tpot_s"] == pytest.approx(summary["tpot_s"]["p90"])
    assert sum(r["requests"]["arrived"] for r in summary["replicas"]) == n
    assert all(r["requests"]["arrived"] > 0 for r in summary["replicas"])  # both replicas served
    # one replica of the same engine: a batch queue alone, and at this load visibly slower
    sim1, summary1 = _sim_run(one, RATE)
    assert isinstance(sim1, BatchQueueSimulation) and not isinstance(sim1, PipelineCluster)
    single = probe(one.data, one.source, RATE, spec.slo, unit=True)
    assert single["ttft_s"] == pytest.approx(summary1["ttft_s"]["p90"])
    assert single["ttft_s"] > p["ttft_s"]


def test_a_one_replica_pipeline_engine_probes_the_same_with_or_without_units(pp_plan, write_plan):
    pp_plan["space"] = {"scheduler.max_num_seqs": [32]}  # no cluster key: a plan without units
    plain = load_plan(write_plan(pp_plan, "plain.yaml"))
    assert not plain.clustered
    c = plain.configs[0]
    p = probe(c.data, c.source, RATE, plain.slo)
    unit = probe(c.data, c.source, RATE, plain.slo, unit=True)
    assert "prefix_cache_hit_rate" not in p and unit.pop("prefix_cache_hit_rate") is not None  # the profile's caching
    assert p == unit and p["completed"] > 0


def test_plan_ranks_and_costs_pipeline_units(pp_plan, write_plan, tmp_path, capsys):
    path, out = write_plan(pp_plan), tmp_path / "out"
    assert main(["plan", path, "--out", str(out), "--workers", "1", "--quiet"]) == 0
    doc = json.loads((out / "plan.json").read_text())
    confs = sorted(doc["configurations"], key=lambda c: c["index"])
    assert [c["status"] for c in confs] == ["feasible", "feasible"]
    for c in confs:
        u = c["unit"]
        assert c["gpus_per_replica"] == 8 and c["gpus_per_unit"] == u["num_replicas"] * 8
        assert not c["capped"] and c["max_rate"] < doc["search"]["max_rate"]
        assert c["units"] == math.ceil(doc["target_rate"] / c["max_rate"] - 1e-9)
        assert c["replicas"] == c["units"] * u["num_replicas"] and c["gpus"] == c["units"] * c["gpus_per_unit"]
        assert c["cost_per_hour"] == pytest.approx(c["gpus"] * c["price_per_gpu_hour"])
        best = c["at_max_rate"]
        assert best["passed"] and best["completed"] == best["num_requests"] and best["in_flight"] == 0
        assert best["num_requests"] == max(100, math.ceil(c["max_rate"] * 15))  # the confirmation's length
        # the failing probe that bounds the answer is a confirmation (the search goes on at length)
        failing = [p for p in c["confirmation"]["probes"] if not p["passed"] and p["rate"] > c["max_rate"]]
        assert failing and min(p["rate"] for p in failing) <= c["max_rate"] * (1 + doc["search"]["tolerance"]) + 1e-9
    # the 2-replica unit started its search at 2 x its one-replica twin's answer
    assert confs[1]["start_scale"] == 2 and confs[1]["start_rate"] == pytest.approx(2 * confs[0]["max_rate"])


SPLIT = {"prefill_replicas": 1, "decode_replicas": 1, "kv_transfer": {"bandwidth_gbps": 400, "latency_s": 0.0005}}
REFUSED = [
    # replicas of vLLM V0's virtual engines, searched by replicas, by form, by profile
    ({"cluster.num_replicas": [1, 2]}, {"pipeline_mode": "virtual-engines"},
     "space.cluster.num_replicas: value 2: 2 replicas of a pipeline-parallel engine in vLLM V0's form"),
    ({"engine.pipeline_mode": ["batch-queue", "virtual-engines"]}, {"cluster": {"num_replicas": 2}},
     "space.engine.pipeline_mode: value \"virtual-engines\": cluster.num_replicas: 2 replicas of a pipeline-parallel"),
    ({"engine.profile": ["vllm-v1", "vllm-v0"]}, {"cluster": {"num_replicas": 2}},
     "space.engine.profile: value \"vllm-v0\": cluster.num_replicas: 2 replicas of a pipeline-parallel engine in vLLM V0"),
    # pipeline parallelism in disaggregated pools: the whole engine's, or a pool's own
    ({"cluster.disaggregation": [None, SPLIT]}, {},
     "space.cluster.disaggregation: value {\"prefill_replicas\": 1, \"decode_replicas\": 1, \"kv_transfer\": "),
    ({"engine.pipeline_parallel_size": [1, 2]}, {"cluster": {"num_replicas": 2, "disaggregation": SPLIT}},
     "space.engine.pipeline_parallel_size: value 2: cluster.disaggregation: disaggregated prefill/decode pools"),
    ({"engine.pipeline_parallel_size": [1], "cluster.disaggregation": [  # one-stage engine, PP decode pool
        {**SPLIT, "decode": {"engine": {"pipeline_parallel_size": 2}}}]}, {},
     "cluster.disaggregation.decode.engine.pipeline_parallel_size: a disaggregated pool of pipeline-parallel"),
]


@pytest.mark.parametrize("space, extra, message", REFUSED, ids=[m[:40] for _, _, m in REFUSED])
def test_what_the_engine_refuses_is_one_error_line_naming_the_plan_and_key(pp_plan, write_plan, assert_refused,
                                                                          space, extra, message):
    pp_plan["space"] = space
    if "pipeline_mode" in extra:
        pp_plan["base"]["engine"]["pipeline_mode"] = extra["pipeline_mode"]
    if "cluster" in extra:
        pp_plan["base"]["cluster"] = extra["cluster"]
    assert_refused(write_plan(pp_plan), "space.", message)

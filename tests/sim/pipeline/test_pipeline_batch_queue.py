"""The pipeline-parallel engine in vLLM V1's form: one scheduler and one KV pool, up to pp batches
in flight through the stages (sim/engine/pipeline/batch_queue.py, ``engine.pipeline_mode: batch-queue``)."""

from __future__ import annotations

import copy
import json

import pytest

from sim.config.scenario import parse_scenario
from sim.cost.shape import BatchShape
from sim.engine.logs.metrics import summarize
from sim.engine.pipeline.simulation import PipelineSimulation
from sim.engine.pipeline.batch_queue import BatchQueueSimulation
from sim.engine.pipeline.summary import summarize_pipeline
from sim.engine.simulation import Simulation
from sim.errors import ConfigError

BASE = {
    "name": "bq", "seed": 3, "model": "llama-3-8b", "gpu": "a100-80gb",
    "engine": {"profile": "eager", "max_model_len": 4096, "pipeline_mode": "batch-queue"},
    "workload": {"num_requests": 1, "arrival": {"type": "poisson", "rate": 1.0},
                 "prompt_tokens": {"type": "fixed", "value": 500},
                 "output_tokens": {"type": "fixed", "value": 40}},
}


def _data(pp: int = 2, mode: str = "batch-queue", engine=None, scheduler=None, kv=None, **workload) -> dict:
    data = copy.deepcopy(BASE)
    data["engine"].update(pipeline_parallel_size=pp, pipeline_mode=mode, **(engine or {}))
    data["workload"].update(workload)
    for key, extra in (("scheduler", scheduler), ("kv", kv)):
        if extra:
            data[key] = extra
    return data


def _scenario(*args, **kwargs):
    return parse_scenario(_data(*args, **kwargs), "bq.yaml")


MIXED = dict(num_requests=300, arrival={"type": "poisson", "rate": 50.0},
             prompt_tokens={"type": "uniform", "low": 100, "high": 3000},
             output_tokens={"type": "uniform", "low": 10, "high": 800})


def _mixed(scheduler) -> dict:
    """MIXED, with fewer requests for static batching (its padded batches are slow to simulate)."""
    static = scheduler is not None and scheduler.get("policy") == "static"
    return {**MIXED, "num_requests": 60} if static else MIXED


def _strip(summary: dict) -> str:
    return json.dumps({k: v for k, v in summary.items() if k != "sim_wall_s"}, sort_keys=True)


@pytest.mark.parametrize(("profile", "scheduler", "kv"), [
    ("eager", None, None),
    ("vllm-v1", None, None),
    ("vllm-v1", {"preemption": "swap"}, {"swap_space_gb": 4}),
    ("sglang", {"policy": "static"}, None),
])
def test_pp_1_is_the_plain_simulation(profile, scheduler, kv) -> None:
    sc = _scenario(1, engine={"profile": profile, "gpu_memory_utilization": 0.3}, scheduler=scheduler, kv=kv,
                   **_mixed(scheduler))
    plain, queued = Simulation(sc).run(), BatchQueueSimulation(sc).run()
    assert _strip(summarize(queued)) == _strip(summarize(plain))
    pre = summarize(plain)["preemptions"]
    if scheduler is None or "preemption" in scheduler:  # the pool binds: the comparison covers preemptions
        assert pre["recompute"] + pre["swap"] > 0
    times = ("arrival_s", "first_token_s", "last_token_s", "finish_s")
    assert [[getattr(r, t) for t in times] for r in queued.requests] == [
        [getattr(r, t) for t in times] for r in plain.requests]


@pytest.mark.parametrize(("profile", "scheduler", "kv"), [
    ("eager", None, None),
    ("vllm-v1", None, None),  # chunked prefill, prefix caching
    ("vllm-v1", {"preemption": "swap"}, {"swap_space_gb": 4}),
    ("vllm-v0", {"when_kv_full": "reject"}, None),  # prefill-first
    ("trtllm", {"policy": "static"}, None),
])
def test_every_request_and_every_block_is_accounted_for(profile, scheduler, kv) -> None:
    workload = _mixed(scheduler)
    sc = _scenario(2, engine={"profile": profile, "gpu_memory_utilization": 0.3}, scheduler=scheduler, kv=kv,
                   **workload)
    sim = BatchQueueSimulation(sc)
    result = sim.run()
    alloc, plan = result.allocator, sim.plan
    null = sim.parts.profile.rules.null_block  # vLLM V1 keeps one block as its null block
    assert alloc.num_total_slots == (plan.num_gpu_blocks - null) * sc.kv.block_size  # the whole pool, not 1/pp
    assert alloc.num_allocated_slots() == 0 and result.swap.used_bytes == 0  # drained: every block back
    steps = result.steps.array()
    assert (steps["kv_allocated_slots"] <= alloc.num_total_slots).all() and steps["kv_allocated_slots"].max() > 0
    s = summarize(result)
    r = s["requests"]
    n = workload["num_requests"]
    assert r["arrived"] == n == r["completed"] + r["rejected"] and r["in_flight"] == 0
    assert r["completed"] > n / 3
    pre = s["preemptions"]
    if kv:
        assert pre["swap"] > 0 and pre["swap_out_bytes"] == pre["swap_in_bytes"]
    static = scheduler is not None and scheduler.get("policy") == "static"
    assert sim.peak_in_flight == (1 if static else 2)  # static batching: its one batch runs to the end


def test_a_request_is_never_in_two_batches_in_flight() -> None:
    sc = _scenario(4, engine={"profile": "vllm-v1", "gpu_memory_utilization": 0.3}, **MIXED)
    launched = []  # (when, its requests) per batch, seen by the step hook as it is scheduled

    def hook(out) -> None:
        if out.scheduled:  # (a batch that only swaps victims out runs nothing)
            launched.append((sim.env.now, {r.request_id for r, _ in out.scheduled}))

    sim = BatchQueueSimulation(sc, step_hook=hook)
    result = sim.run()
    ends = result.steps.array()["time_s"]  # a row per batch, written as its output is applied
    assert len(ends) == len(launched) > 300
    assert (ends[1:] >= ends[:-1]).all()  # outputs applied in the order the batches were sent
    overlapping = 0
    for i, (start, ids) in enumerate(launched):
        for j in range(i + 1, len(launched)):
            if launched[j][0] >= ends[i]:
                break  # batch j was scheduled after batch i came back
            overlapping += 1
            assert not ids & launched[j][1], (i, j)
    assert overlapping > 300 and sim.peak_in_flight == 4


@pytest.mark.parametrize("pp", [2, 4])
def test_one_request_steps_take_the_stages_and_transfers_in_turn(pp: int) -> None:
    sim = BatchQueueSimulation(_scenario(pp))
    result = sim.run()
    cost = sim.cost
    steps = result.steps.array()
    assert len(steps["duration_s"]) == 40  # the prefill (with the first token) and 39 decodes
    for i, duration in enumerate(steps["duration_s"]):
        shape = BatchShape.prefill(500) if i == 0 else BatchShape.decode(1, 500 + i)
        assert duration == pytest.approx(sum(cost.stage_times_s(shape)) + (pp - 1) * cost.transfer_s(shape), rel=1e-9)
    assert sim.peak_in_flight == 1  # one request: never two batches
    summary = summarize_pipeline(result)
    assert summary["parallel"]["bubble_share"] > 1 - 1 / pp - 0.05
    assert summary["engine"]["busy_s"] == pytest.approx(steps["duration_s"].sum())


def _saturated(mode: str, max_num_seqs: int, profile: str):
    sc = _scenario(2, mode, engine={"profile": profile}, scheduler={"max_num_seqs": max_num_seqs},
                   num_requests=250, arrival={"type": "poisson", "rate": 100.0},
                   prompt_tokens={"type": "fixed", "value": 50}, output_tokens={"type": "fixed", "value": 200})
    return summarize_pipeline(PipelineSimulation(sc).run())


@pytest.mark.parametrize("profile", ["eager", "vllm-v1"])
def test_a_saturated_decode_heavy_load_keeps_both_stages_busy(profile: str) -> None:
    queue = _saturated("batch-queue", 64, profile)
    busy = [st["busy_share"] for st in queue["parallel"]["stages"]]
    # the last stage (it also runs the lm_head) binds: near 1; the first idles only for that difference
    assert busy[1] > 0.95 and busy[0] > 0.85
    assert queue["engine"]["busy_s"] <= queue["engine"]["simulated_s"] + 1e-9  # rows tile busy time
    assert queue["parallel"]["peak_batches_in_flight"] == 2 and queue["engine"]["peak_running"] == 64
    # vLLM V0 at the same total concurrency (two virtual engines of 32): the same pipeline, as busy
    v0 = _saturated("virtual-engines", 32, profile)
    for mine, theirs in zip(busy, (st["busy_share"] for st in v0["parallel"]["stages"])):
        assert mine == pytest.approx(theirs, abs=0.03)
    assert queue["throughput"]["output_tokens_per_s"] == pytest.approx(
        v0["throughput"]["output_tokens_per_s"], rel=0.03)


def _kv_bound(mode: str):
    sc = _scenario(2, mode, engine={"num_gpu_blocks_override": 1200}, num_requests=150,
                   arrival={"type": "poisson", "rate": 1000.0},
                   prompt_tokens={"type": "uniform", "low": 300, "high": 1500},
                   output_tokens={"type": "uniform", "low": 50, "high": 400})
    sim = PipelineSimulation(sc)
    return sim, summarize_pipeline(sim.run())


def test_one_pool_holds_more_requests_than_a_virtual_engine() -> None:
    queue_sim, queue = _kv_bound("batch-queue")
    v0_sim, v0 = _kv_bound("virtual-engines")
    assert isinstance(queue_sim, BatchQueueSimulation) and "replicas" not in queue
    assert queue["parallel"]["num_gpu_blocks"] == queue["kv"]["num_gpu_blocks"] == 1200
    assert v0["parallel"]["blocks_per_virtual_engine"] == 600
    assert queue["kv"]["peak_used_fraction"] > 0.95  # the pool binds
    per_engine = [r["peak_running"] for r in v0["replicas"]]
    assert queue["engine"]["peak_running"] > 1.5 * max(per_engine)
    for s in (queue, v0):
        r = s["requests"]
        assert r["completed"] == r["arrived"] == 150


def test_a_request_longer_than_half_the_pool_runs_in_the_batch_queue_only() -> None:
    kwargs = dict(engine={"num_gpu_blocks_override": 300}, prompt_tokens={"type": "fixed", "value": 3500},
                  output_tokens={"type": "fixed", "value": 100})
    with pytest.raises(ConfigError) as err:
        PipelineSimulation(_scenario(2, "virtual-engines", **kwargs))
    assert err.value.key == "engine.pipeline_parallel_size" and "1/2 of the KV pool" in err.value.message
    result = PipelineSimulation(_scenario(2, "batch-queue", **kwargs)).run()
    s = summarize(result)
    assert s["requests"]["completed"] == 1 and s["kv"]["peak_used_fraction"] > 0.5


def test_replicas_of_a_batch_queue_engine_run_as_a_cluster() -> None:
    # (sim/engine/pipeline/cluster.py; tests/sim/pipeline/test_pipeline_replicas.py covers them)
    data = _data(2)
    data["cluster"] = {"num_replicas": 2}
    sc = parse_scenario(data, "bq.yaml")
    sim = PipelineSimulation(sc)
    assert type(sim).__name__ == "PipelineCluster" and len(sim.replicas) == 2
    with pytest.raises(ConfigError) as err:  # the one-engine class alone still refuses them
        BatchQueueSimulation(sc)
    assert err.value.key == "cluster.num_replicas"

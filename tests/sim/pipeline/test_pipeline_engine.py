"""The pipeline-parallel engine in vLLM V0's form: virtual engines whose batches hold the stages in turn
(sim/engine/pipeline/simulation.py; ``engine.pipeline_mode: virtual-engines``, the vllm-v0 profile's default)."""

from __future__ import annotations

import copy
import json

import pytest

from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.cost.shape import BatchShape
from sim.engine.logs.metrics import summarize
from sim.engine.pipeline.simulation import PipelineSimulation
from sim.engine.pipeline.summary import summarize_pipeline
from sim.engine.simulation import Simulation
from sim.errors import ConfigError

BASE = {
    "name": "pp", "seed": 3, "model": "llama-3-8b", "gpu": "a100-80gb",
    "engine": {"profile": "eager", "max_model_len": 4096, "pipeline_mode": "virtual-engines"},
    "workload": {"num_requests": 1, "arrival": {"type": "poisson", "rate": 1.0},
                 "prompt_tokens": {"type": "fixed", "value": 500},
                 "output_tokens": {"type": "fixed", "value": 40}},
}


def _scenario(pp: int = 1, **workload):
    data = copy.deepcopy(BASE)
    data["engine"]["pipeline_parallel_size"] = pp
    data["workload"].update(workload)
    return parse_scenario(data, "pp.yaml")


def _without_wall(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k != "sim_wall_s"}


def test_pp_1_is_todays_engine() -> None:
    data = copy.deepcopy(BASE)
    data["workload"]["num_requests"] = 30
    plain = summarize(Simulation(parse_scenario(data, "pp.yaml")).run())
    data["engine"]["pipeline_parallel_size"] = 1
    explicit = summarize(Simulation(parse_scenario(data, "pp.yaml")).run())
    assert _without_wall(plain) == _without_wall(explicit)
    assert "parallel" not in plain


@pytest.mark.parametrize("pp", [2, 4])
def test_one_request_steps_take_the_stages_and_transfers_in_turn(pp: int) -> None:
    sim = PipelineSimulation(_scenario(pp))
    result = sim.run()
    cost = sim.cost
    engine = next(r for r in result.replicas if r.requests)  # the one virtual engine that got it
    steps = engine.steps.array()
    assert len(steps["duration_s"]) == 40  # the prefill (with the first token) and 39 decodes
    for i, duration in enumerate(steps["duration_s"]):
        shape = (BatchShape.prefill(500) if i == 0 else BatchShape.decode(1, 500 + i))
        stages = cost.stage_times_s(shape)
        assert duration == pytest.approx(sum(stages) + (pp - 1) * cost.transfer_s(shape), rel=1e-9)
    busy = result.extra["pipeline"]["stage_busy_s"]
    assert sum(busy) / result.end_s < 1.0  # one batch in flight: never two stages at once
    summary = summarize_pipeline(result)
    assert summary["parallel"]["bubble_share"] > 1 - 1 / pp - 0.05


def _saturated(pp: int):
    sc = _scenario(pp, num_requests=600, arrival={"type": "poisson", "rate": 2000.0},
                   prompt_tokens={"type": "fixed", "value": 200}, output_tokens={"type": "fixed", "value": 100})
    return PipelineSimulation(sc).run()


@pytest.mark.parametrize(("pp", "overlap"), [(2, 1.8), (4, 3.2)])
def test_many_requests_keep_every_stage_busy(pp: int, overlap: float) -> None:
    result = _saturated(pp)
    busy = result.extra["pipeline"]["stage_busy_s"]
    # the stage-seconds done per simulated second: M when every stage is always busy, 1 for
    # batches one at a time (the per-stage rate times M, bubbles shrinking)
    assert sum(busy) / result.end_s > overlap
    summary = summarize_pipeline(result)
    assert summary["parallel"]["bubble_share"] < 1 - overlap / pp + 1e-9
    assert summary["requests"]["completed"] == 600


def test_block_accounting_holds_on_every_virtual_engine() -> None:
    sc = _scenario(2, num_requests=300, arrival={"type": "poisson", "rate": 400.0},
                   prompt_tokens={"type": "uniform", "low": 100, "high": 2000},
                   output_tokens={"type": "uniform", "low": 10, "high": 400})
    sim = PipelineSimulation(sc)
    blocks = sim.plan.num_gpu_blocks // 2
    result = sim.run()
    assert len(result.replicas) == 2 and not sim.macro_steps
    arrived = 0
    for engine in result.replicas:
        alloc = engine.allocator
        assert alloc.num_total_slots == blocks * sc.kv.block_size  # 1/pp of the pool each
        assert alloc.num_allocated_slots() == 0  # drained: every block back
        steps = engine.steps.array()
        assert (steps["kv_allocated_slots"] <= alloc.num_total_slots).all()
        assert steps["kv_allocated_slots"].max() > 0
        r = summarize(engine)["requests"]
        assert r["arrived"] == r["completed"] + r["rejected"] + r["in_flight"] and r["in_flight"] == 0
        arrived += r["arrived"]
        assert r["arrived"] > 50  # the router spread them (fewest unfinished)
    assert arrived == len(result.requests) == 300


def test_refusals_name_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        Simulation(_scenario(2))
    assert err.value.key == "engine.pipeline_parallel_size"
    data = copy.deepcopy(BASE)
    data["engine"]["pipeline_parallel_size"] = 2
    data["cluster"] = {"num_replicas": 2}
    with pytest.raises(ConfigError) as err:
        PipelineSimulation(parse_scenario(data, "pp.yaml"))
    assert err.value.key == "cluster.num_replicas"


def test_sim_run_writes_the_parallel_block(tmp_path, capsys) -> None:
    import yaml

    data = copy.deepcopy(BASE)
    data["engine"].update(pipeline_parallel_size=2, tensor_parallel_size=2)
    data["model"] = "llama-3-70b"
    data["gpu"] = "h100-sxm"
    data["workload"]["num_requests"] = 20
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    par = summary["parallel"]
    assert (par["tensor_parallel_size"], par["pipeline_parallel_size"], par["gpus_per_replica"]) == (2, 2, 4)
    assert par["stage_layers"] == [40, 40] and len(par["stages"]) == 2
    assert 0.0 <= par["bubble_share"] <= 1.0
    assert all(0.0 < s["busy_share"] <= 1.0 for s in par["stages"])
    assert summary["requests"]["completed"] == 20
    assert (tmp_path / "out" / "report.html").exists() and (tmp_path / "out" / "steps.csv").exists()

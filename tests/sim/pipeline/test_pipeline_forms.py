"""Which pipeline-parallel form runs (``engine.pipeline_mode``, default the profile's) and what
``sim run`` and ``sim sweep`` write for the batch queue (sim/config/profile_schema.py,
sim/engine/pipeline/simulation.py, sim/engine/pipeline/summary.py)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from sim.cli.main import main
from sim.config.profile_schema import PipelineMode, pipeline_mode
from sim.config.scenario import parse_scenario
from sim.engine.pipeline.simulation import PipelineSimulation
from sim.engine.pipeline.batch_queue import BatchQueueSimulation
from sim.errors import ConfigError
from sim.sweep.runner import run_point

SCENARIO = {
    "name": "pp-forms", "seed": 5, "model": "llama-3-70b", "gpu": "h100-sxm",
    "engine": {"max_model_len": 4096, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
    "workload": {"num_requests": 30, "arrival": {"type": "poisson", "rate": 4.0},
                 "prompt_tokens": {"type": "fixed", "value": 400},
                 "output_tokens": {"type": "fixed", "value": 30}},
}


def _data(**engine) -> dict:
    data = copy.deepcopy(SCENARIO)
    data["engine"].update(engine)
    return data


@pytest.mark.parametrize(("profile", "form"), [
    (None, "batch-queue"),  # the default profile, vllm-v1
    ("vllm-v1", "batch-queue"), ("vllm-v0", "virtual-engines"), ("sglang", "batch-queue"),
    ("trtllm", "batch-queue"), ("eager", "batch-queue"), ("compiled", "batch-queue"),
])
def test_each_profile_has_a_default_form(profile, form) -> None:
    sc = parse_scenario(_data(**({"profile": profile} if profile else {})), "s.yaml")
    assert sc.engine.pipeline_mode is None and pipeline_mode(sc.engine) is PipelineMode(form)
    sim = PipelineSimulation(sc)
    assert isinstance(sim, BatchQueueSimulation) == (form == "batch-queue")


def test_the_scenario_key_wins_over_the_profile() -> None:
    sc = parse_scenario(_data(profile="vllm-v0", pipeline_mode="batch-queue"), "s.yaml")
    assert isinstance(PipelineSimulation(sc), BatchQueueSimulation)
    sc = parse_scenario(_data(pipeline_mode="virtual-engines"), "s.yaml")
    assert type(PipelineSimulation(sc)) is PipelineSimulation


@pytest.mark.parametrize("value", ["v1", 2, True])
def test_a_bad_form_is_one_error_naming_the_key(value, tmp_path, capsys) -> None:
    with pytest.raises(ConfigError) as err:
        parse_scenario(_data(pipeline_mode=value), "s.yaml")
    assert err.value.key == "engine.pipeline_mode" and "'virtual-engines' or 'batch-queue'" in err.value.message
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_data(pipeline_mode=value)))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "engine.pipeline_mode" in lines[0]


def test_sim_run_writes_the_batch_queue_parallel_block(tmp_path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    par = s["parallel"]
    assert (par["form"], par["form_from"]) == ("batch-queue", "profile vllm-v1")
    assert (par["tensor_parallel_size"], par["pipeline_parallel_size"], par["gpus_per_replica"]) == (2, 2, 4)
    assert par["stage_layers"] == [40, 40] and len(par["stages"]) == 2
    assert par["num_gpu_blocks"] == s["kv"]["num_gpu_blocks"] and par["max_batches_in_flight"] == 2
    assert 1 <= par["peak_batches_in_flight"] <= 2 and par["batches"] == s["engine"]["num_steps"]
    assert all(0.0 < st["busy_share"] <= 1.0 for st in par["stages"]) and 0.0 <= par["bubble_share"] <= 1.0
    assert "replicas" not in s and s["requests"]["completed"] == 30
    assert any("batch queue" in n for n in s["notes"])
    out = tmp_path / "out"
    assert (out / "report.html").exists() and "section-error" not in (out / "report.html").read_text()
    assert (out / "requests.csv").read_text().count("\n") == 31  # a header and every request


def test_the_virtual_engines_block_names_its_form(tmp_path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_data(pipeline_mode="virtual-engines")))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--json", "--no-report"]) == 0
    par = json.loads(capsys.readouterr().out)["parallel"]
    assert (par["form"], par["form_from"], par["virtual_engines"]) == ("virtual-engines", "engine.pipeline_mode", 2)


def test_a_sweep_point_runs_the_form_of_its_values() -> None:
    for form in ("batch-queue", "virtual-engines"):
        record = run_point("p", {"engine.pipeline_mode": form}, _data(pipeline_mode=form), "s.yaml")
        assert record["status"] == "ok", record["error"]
        assert record["summary"]["parallel"]["form"] == form
        assert record["summary"]["requests"]["completed"] == 30

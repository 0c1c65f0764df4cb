"""Plan files validate: every problem is one ConfigError line, exit 2 through the CLI."""

from __future__ import annotations

import pytest

from sim.cli.main import main
from sim.errors import ConfigError
from sim.plan.spec import load_plan


def test_a_good_plan_expands_its_space(tiny_plan, write_plan):
    tiny_plan["space"]["gpu"] = ["a100-80gb", "h100-sxm"]
    spec = load_plan(write_plan(tiny_plan))
    assert [c.values for c in spec.configs] == [
        {"scheduler.max_num_seqs": 4, "gpu": "a100-80gb"}, {"scheduler.max_num_seqs": 4, "gpu": "h100-sxm"},
        {"scheduler.max_num_seqs": 16, "gpu": "a100-80gb"}, {"scheduler.max_num_seqs": 16, "gpu": "h100-sxm"}]
    c = spec.configs[1]
    assert c.data["gpu"] == "h100-sxm" and c.data["workload"]["num_requests"] == 150
    assert c.data["slo"] == {"ttft_s": 0.05, "tpot_s": 0.005}
    assert c.price_per_gpu_hour == spec.prices["h100-sxm"]["usd_per_gpu_hour"] > 0
    assert spec.prices["h100-sxm"]["source"] and spec.prices["h100-sxm"]["date"]


def test_a_scenario_file_is_read_relative_to_the_plan(tiny_plan, write_plan, tmp_path):
    import yaml

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.yaml").write_text(yaml.safe_dump(tiny_plan.pop("base")))
    tiny_plan["scenario"] = "sub/base.yaml"
    spec = load_plan(write_plan(tiny_plan))
    assert spec.configs[0].source.endswith("sub/base.yaml") and spec.configs[0].data["model"] == "tiny-llama"


def test_prices_override_the_shipped_table(tiny_plan, write_plan):
    tiny_plan["prices"] = {"a100-80gb": 0.5}
    assert load_plan(write_plan(tiny_plan)).configs[0].price_per_gpu_hour == 0.5


BAD = [
    (lambda p: p.update(colour="red"), "colour: unknown key"),
    (lambda p: p.pop("slo"), "slo: required key is missing"),
    (lambda p: p["slo"].update(percentile=120), "slo.percentile: got 120"),
    (lambda p: p["slo"].update(attainment=0), "slo.attainment: got 0"),
    (lambda p: p["slo"].pop("tpot_s"), "slo.tpot_s: required key is missing"),
    (lambda p: p["slo"].update(p99=1), "slo.p99: unknown key"),
    (lambda p: p.update(space={}), "space: expected a non-empty mapping"),
    (lambda p: p.update(space={"gpu": []}), "space.gpu: expected a non-empty list"),
    (lambda p: p.update(space={"gpu": ["l40s", "l40s"]}), "space.gpu: a value is repeated"),
    (lambda p: p.update(space={"workload.arrival.rate": [1, 2]}), "space.workload.arrival.rate: the plan sets"),
    (lambda p: p.update(space={"engine.bogus": [1, 2]}), "engine.bogus"),
    (lambda p: p.update(space={"cluster.router": ["round-robin", "random"]}), "space.cluster.router: value \"random\""),
    (lambda p: p.update(space={"cluster.size": [2]}), "space.cluster.size: a plan searches cluster, "),
    (lambda p: p["search"].update(reuse="yes"), "search.reuse: got 'yes'"),
    (lambda p: p.update(space={"kv.block_size": [16, 0]}), "kv.block_size"),
    (lambda p: p.update(space={"gpu": ["a100-40gb"]}), "no price for gpu 'a100-40gb'"),
    (lambda p: p.update(prices={"l40s": -1}), "prices.l40s: got -1"),
    (lambda p: p.update(target_rate=0), "target_rate: got 0"),
    (lambda p: p["search"].update(max_rate=1), "search.max_rate: 1 is below search.min_rate"),
    (lambda p: p["search"].update(num_requests=2.5), "search.num_requests: got 2.5"),
    (lambda p: p.update(scenario="x.yaml"), "exactly one of base"),
    (lambda p: p["base"]["workload"].pop("arrival"), "workload.arrival: the plan varies"),
]


@pytest.mark.parametrize("edit, message", BAD, ids=[m for _, m in BAD])
def test_bad_plans_are_one_line_errors_and_exit_2(tiny_plan, write_plan, tmp_path, capsys, edit, message):
    edit(tiny_plan)
    path = write_plan(tiny_plan)
    with pytest.raises(ConfigError) as err:
        load_plan(path)
    assert message in str(err.value)
    assert main(["plan", path, "--out", str(tmp_path / "out"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_missing_file_and_bad_workers_exit_2(tmp_path, tiny_plan, write_plan, capsys):
    assert main(["plan", str(tmp_path / "nope.yaml")]) == 2
    assert main(["plan", write_plan(tiny_plan), "--workers", "0"]) == 2
    assert all(line.startswith("error: ") for line in capsys.readouterr().err.strip().splitlines())


def test_a_replica_is_tensor_x_pipeline_parallel_gpus(tiny_plan, write_plan):
    from sim.plan.results import add_costs
    from sim.plan.search import evaluate_config

    tiny_plan["base"].update(model="llama-3-8b")
    tiny_plan["base"]["engine"].pop("num_gpu_blocks_override")
    tiny_plan["space"] = {"engine.tensor_parallel_size": [1, 2], "engine.pipeline_parallel_size": [1, 2]}
    tiny_plan["slo"]["ttft_s"] = 1e-6  # unreachable at the first probe: one short simulation each
    spec = load_plan(write_plan(tiny_plan))
    assert [(c.tensor_parallel_size, c.pipeline_parallel_size) for c in spec.configs] == [(1, 1), (1, 2), (2, 1),
                                                                                          (2, 2)]
    for c in spec.configs:
        rec = evaluate_config(c, spec.slo, spec.search)
        assert rec["gpus_per_replica"] == c.tensor_parallel_size * c.pipeline_parallel_size
        # a feasible record with max rate 30 at the target 100 req/s: 4 replicas of that many GPUs
        costed = add_costs(spec, {**rec, "status": "feasible", "max_rate": 30.0,
                                  "at_max_rate": {"mean_output_tokens": 50}})
        assert costed["replicas"] == 4 and costed["gpus"] == 4 * rec["gpus_per_replica"]
        assert costed["cost_per_hour"] == pytest.approx(costed["gpus"] * c.price_per_gpu_hour)


def test_every_shipped_price_names_a_shipped_gpu_with_a_source():
    from sim.calib.calibration import available_calibrations
    from sim.plan.prices import shipped_prices
    prices = shipped_prices()
    assert set(prices) <= set(available_calibrations())
    for gpu, entry in prices.items():
        assert entry["usd_per_gpu_hour"] > 0 and len(entry["source"]) > 20, gpu
    # the GPUs added with their datasheets are priced, from RunPod where it rents them
    for gpu in ("h100-pcie", "h100-nvl", "b200", "l4", "l40", "rtx-3090", "rtx-a6000", "mi300x"):
        assert "RunPod" in prices[gpu]["source"], gpu
    for gpu in ("a10", "a10g", "h20"):
        assert "not on RunPod" in prices[gpu]["source"], gpu

"""`sim plan` end to end on a tiny plan: the files, the ranking, the costs, and the issue's
done-when check: a plain simulation of the best configuration at 0.9 x its max rate meets
the SLO and at 1.2 x does not."""

from __future__ import annotations

import copy
import csv
import io
import json
import math

import pytest

from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.engine.simulation import Simulation
from sim.plan.search import judge
from sim.plan.spec import load_plan


@pytest.fixture
def planned(tiny_plan, write_plan, tmp_path, capsys):
    tiny_plan["space"]["gpu"] = ["a100-80gb", "l40s"]
    tiny_plan["base"]["engine"]["num_gpu_blocks_override"] = 64
    path = write_plan(tiny_plan)
    out = tmp_path / "out"
    assert main(["plan", path, "--out", str(out), "--workers", "2"]) == 0
    return path, out, json.loads((out / "plan.json").read_text()), capsys.readouterr().out


def test_plan_writes_ranked_costed_files(planned, capsys):
    path, out, doc, shown = planned
    confs = doc["configurations"]
    assert len(confs) == 4 and {c["status"] for c in confs} == {"feasible"}
    costs = [c["cost_per_hour"] for c in confs]
    assert costs == sorted(costs) and [c["rank"] for c in confs] == [1, 2, 3, 4]
    for c in confs:
        assert c["replicas"] == math.ceil(doc["target_rate"] / c["max_rate"] - 1e-9)
        assert c["gpus"] == c["replicas"] * c["tensor_parallel_size"]
        assert c["cost_per_hour"] == pytest.approx(c["gpus"] * c["price_per_gpu_hour"])
        assert c["memory"]["kv_pool_tokens"] == 64 * 16 and c["memory"]["max_full_length_requests"] == 2
        assert c["why"].startswith("KV pool holds 2 full-length requests")
    assert any(c["pareto"] for c in confs)
    rows = list(csv.DictReader(io.StringIO((out / "plan.csv").read_text())))
    assert [r["rank"] for r in rows] == ["1", "2", "3", "4"] and "scheduler.max_num_seqs" in rows[0]
    header = (out / "plan.csv").read_text().splitlines()[0].split(",")
    assert len(header) == len(set(header)) and header.count("gpu") == 1
    page = (out / "plan.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Pareto front" in page and "Max rate per value of gpu" in page
    assert "#1: KV pool holds" in shown and "feasible 4" in shown
    # an existing plan is kept unless --force
    assert main(["plan", path, "--out", str(out), "--quiet"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["plan", path, "--out", str(out), "--quiet", "--force", "--workers", "1"]) == 0
    again = json.loads((out / "plan.json").read_text())["configurations"]
    strip = ("wall_s",)
    assert [{k: v for k, v in c.items() if k not in strip} for c in again] == confs  # workers 1 == workers 2


def test_done_when_the_best_rate_holds_at_0_9x_and_fails_at_1_2x(planned):
    """At steady state: runs as long as the plan's confirmation (search.confirm_duration_s of
    arrivals), judged past the same warm-up."""
    path, _, doc, _ = planned
    best = doc["configurations"][0]
    spec = load_plan(path)
    config = spec.configs[best["index"]]
    rate = best["max_rate"]
    assert best["confirmation"]["max_rate"] == rate

    def plain_run(r):
        data = copy.deepcopy(config.data)
        data["workload"]["arrival"]["rate"] = r
        data["workload"]["num_requests"] = spec.search.probe_requests(r, spec.search.confirm_duration_s)
        sc = parse_scenario(data, config.source)
        assert sc.seed == best["seed"] == 3
        return judge(Simulation(sc).run(), spec.slo, r, spec.search.warmup)

    assert plain_run(0.9 * rate)["passed"]
    assert not plain_run(1.2 * rate)["passed"]

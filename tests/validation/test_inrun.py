"""`sim run SCENARIO --validate-every N` (validation/inrun.py): every Nth step also on the real
engine. The run's other outputs are byte-identical to the run without the flag; the budget
is counted; --correct moves a bounded factor toward the samples' ratio; bad flags are one line."""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.config.scenario import load_scenario
from sim.engine.simulation import Simulation
from sim.engine.step.correction import CorrectedRunner, StepCorrection
from sim.engine.step.predict import predicted_step_s
from validation.inrun import InRunValidator

SCENARIO = str(Path(__file__).resolve().parents[2] / "scenarios" / "validate-cpu.yaml")
SMALL = ["--set", "workload.num_requests=10"]


def _run(tmp_path, name, *flags):
    out = tmp_path / name
    assert main(["run", SCENARIO, *SMALL, "--out", str(out), "--quiet", *flags]) == 0
    return out


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_the_run_validates_itself_and_its_other_outputs_are_byte_identical(tmp_path) -> None:
    plain = _run(tmp_path, "plain")
    checked = _run(tmp_path, "checked", "--validate-every", "4")
    for name in ("requests.csv", "steps.csv"):
        assert (checked / name).read_bytes() == (plain / name).read_bytes(), name
    a, b = _summary(plain), _summary(checked)
    v = b.pop("validation")
    a.pop("sim_wall_s"), b.pop("sim_wall_s")
    assert json.dumps(a) == json.dumps(b)
    # every step that computed a batch was counted, every 4th sampled (the budget was not reached)
    assert v["engine_steps"] == a["engine"]["num_steps"]
    assert v["sampled_steps"] == v["engine_steps"] // 4 == v["eligible_steps"] and v["skipped_over_budget"] == 0
    assert sum(k["num_steps"] for k in v["by_kind"].values()) == v["num_steps"] == v["sampled_steps"]
    assert [s["step"] for s in v["samples"]] == list(range(4, 4 * v["sampled_steps"] + 1, 4))
    assert all(s["measured_s"] > 0 and s["predicted_s"] > 0 for s in v["samples"])
    assert sum(w["num_steps"] for w in v["drift_over_run"]) == v["sampled_steps"]
    assert v["correction"] is None and v["device"] == "cpu" and 0 < v["cost_s"]
    report = (checked / "report.html").read_text()
    assert "Validation against the real engine" in report and "section could not be drawn" not in report
    assert "Validation against the real engine" not in (plain / "report.html").read_text()


def test_correct_runs_end_to_end_with_factors_in_bounds_and_shown(tmp_path) -> None:
    out = _run(tmp_path, "corrected", "--validate-every", "5", "--correct")
    v = _summary(out)["validation"]
    corr = v["correction"]
    assert len(corr["history"]) == v["sampled_steps"] > 0
    assert all(0.5 <= h["factor"] <= 2.0 for h in corr["history"])
    assert "corrected_mape" in corr and "factor per step kind" in (out / "report.html").read_text()


def _validator(sc, every, budget_s, time_batch, correction=None, cost_per_sample=0.5):
    ticks = count()
    clock = lambda: next(ticks) * cost_per_sample  # noqa: E731 - read before and after each sample
    v = InRunValidator(every, budget_s, time_batch, correction, clock=clock)
    sim = Simulation(load_scenario(SCENARIO, ["workload.num_requests=10"]), step_hook=v.hook)
    v.attach(sim)
    return v, sim


def test_the_budget_stops_sampling_and_counts_the_skipped_steps() -> None:
    executed = []
    v, sim = _validator(load_scenario(SCENARIO), 3, 2.0, lambda out: executed.append(out) or 1e-3)
    sim.run()
    eligible = v.num_steps // 3
    assert eligible > 10
    assert len(executed) == len(v.samples) == 4  # 0.5 s each: 0, 0.5, 1.0, 1.5 spent before; 2.0 stops
    assert v.skipped == eligible - 4 and v.spent_s == pytest.approx(2.0)


def test_correction_moves_toward_the_ratio_within_its_bounds() -> None:
    c = StepCorrection(alpha=0.3)
    seen = [c.update("decode", 1.5, float(t)) for t in range(30)]
    assert all(a < b <= 1.5 for a, b in zip(seen, seen[1:])) and seen[-1] == pytest.approx(1.5, rel=1e-3)
    assert c.factors["prefill"] == 1.0  # per kind
    up = [c.update("prefill", 50.0, 0.0) for _ in range(40)]  # one wild sample moves it a bounded step
    assert up[0] == pytest.approx(1.3) and max(up) <= 2.0 and up[-1] == pytest.approx(2.0, rel=1e-4)
    down = [c.update("mixed", 1e-3, 0.0) for _ in range(40)]
    assert down[0] == pytest.approx(0.85) and min(down) >= 0.5 and down[-1] == pytest.approx(0.5, rel=1e-4)
    assert len(c.history) == 110 and c.history[-1] == (0.0, "mixed", down[-1])
    with pytest.raises(ValueError):
        StepCorrection(low=1.5)


def test_correct_rescales_the_simulated_steps_by_the_learnt_factor() -> None:
    sc = load_scenario(SCENARIO)
    holder = {}
    slow = lambda out: 1.6 * predicted_step_s(holder["cost"], out)  # noqa: E731 - the real engine 1.6x slower
    corr = StepCorrection()
    v, sim = _validator(sc, 4, 1e9, slow, corr)
    holder["cost"] = sim.cost
    assert isinstance(sim.core.runner, CorrectedRunner)
    end = sim.run().end_s
    plain = Simulation(load_scenario(SCENARIO, ["workload.num_requests=10"])).run().end_s
    for kind in {s.kind for s in v.samples}:
        assert 1.0 < corr.factors[kind] <= 1.6
    assert all(s.measured_s / s.predicted_s == pytest.approx(1.6) for s in v.samples)
    assert end > plain  # the clock follows the (slower) samples


@pytest.mark.parametrize("flags, key", [
    (["--validate-every", "0"], "--validate-every"),
    (["--validate-every", "-2"], "--validate-every"),
    (["--validate-every", "x"], "--validate-every"),
    (["--validate-every", "5", "--validate-budget", "0"], "--validate-budget"),
    (["--validate-every", "5", "--validate-budget", "nan"], "--validate-budget"),
    (["--validate-every", "5", "--validate-device", "tpu"], "--validate-device"),
    (["--correct"], "--correct"),
    (["--validate-budget", "5"], "--validate-budget"),
    (["--validate-device", "cpu"], "--validate-device"),
    (["--validate-every", "5", "--validate-budget", "inf"], "--validate-budget"),
    (["--validate-every", "5", "--validate-device", "cuda"], "--validate-device"),
    (["--validate-every", "5", "--set", "model=llama-3.1-8b"], "model"),
    (["--validate-every", "5", "--set", "gpu=h100-sxm"], "gpu"),
    (["--validate-every", "5", "--set", "cluster.num_replicas=2"], "cluster.num_replicas"),
    (["--validate-every", "5", "--set", "kv.allocator=contiguous-exact"], "kv.allocator"),
])
def test_bad_flags_give_one_line_and_exit_2(tmp_path, capsys, monkeypatch, flags, key) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # --validate-device cuda: refused
    rc = main(["run", SCENARIO, *SMALL, "--out", str(tmp_path / "o"), "--quiet", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error:") and err.count("\n") == 1 and key in err, err
    assert not (tmp_path / "o" / "summary.json").exists()

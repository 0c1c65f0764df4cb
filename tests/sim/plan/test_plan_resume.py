"""`sim plan` keeps one point file per finished configuration: --resume searches only the
others and gives the same plan.json as an uninterrupted run; a changed plan, a malformed
point file or a folder holding points without --resume/--force is one error line."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from sim.cli.main import main
from sim.plan.points import fingerprint, load_points, point_files
from sim.plan.runner import run_plan
from sim.plan.spec import load_plan
from sim.sweep.executors import ExecutorKind, make_executor


def _doc(out):
    doc = json.loads((out / "plan.json").read_text())
    doc.pop("wall_s")
    return doc


@pytest.fixture
def pool_plan(tiny_plan, write_plan):
    """Chains along num_gpu_blocks_override (waves 0, 1, 2), so resumed starts come from saved records."""
    plan = copy.deepcopy(tiny_plan)
    plan["base"]["engine"].pop("num_gpu_blocks_override")
    plan["space"] = {"scheduler.max_num_seqs": [4, 16], "engine.num_gpu_blocks_override": [32, 64, 128]}
    return plan, write_plan(plan)


@pytest.fixture
def uninterrupted(pool_plan, tmp_path):
    _, path = pool_plan
    out = tmp_path / "whole"
    assert main(["plan", path, "--out", str(out), "--workers", "1", "--quiet"]) == 0
    return out


def test_a_resumed_plan_equals_an_uninterrupted_one(pool_plan, uninterrupted, tmp_path, capsys):
    plan, path = pool_plan
    spec = load_plan(path)
    out = tmp_path / "resumed"
    finished = []

    def interrupt_after_three(record):
        finished.append(record["index"])
        if len(finished) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_plan(spec, make_executor(ExecutorKind.LOCAL, 1), out, on_done=interrupt_after_three)
    assert sorted(int(p.stem) for p in point_files(out)) == sorted(finished)
    assert not (out / "plan.json").exists()
    # the CLI refuses the folder without --resume, then resumes: only the missing ones run
    assert main(["plan", path, "--out", str(out), "--workers", "1", "--quiet"]) == 2
    assert "--resume" in capsys.readouterr().err
    again = run_plan(spec, make_executor(ExecutorKind.LOCAL, 1), out, resume=True)
    assert (again.reused, again.computed) == (3, 3)
    assert main(["plan", path, "--out", str(out), "--workers", "2", "--resume"]) == 0
    assert "searched 0, reused 6" in capsys.readouterr().out
    assert _doc(out) == _doc(uninterrupted)
    assert (out / "plan.csv").read_text() == (uninterrupted / "plan.csv").read_text()


def test_resume_after_losing_a_chain_start_recomputes_the_same_answers(pool_plan, uninterrupted, tmp_path):
    _, path = pool_plan
    out = tmp_path / "partial"
    shutil.copytree(uninterrupted, out)
    for name in ("plan.json", "plan.csv", "plan.html"):
        (out / name).unlink()
    (out / "configs" / "0000.json").unlink()  # wave 0: its neighbour (0001) stays, and starts from its record
    (out / "configs" / "0004.json").unlink()  # wave 1: starts from the saved record of 0003
    assert main(["plan", path, "--out", str(out), "--workers", "2", "--resume", "--quiet"]) == 0
    assert _doc(out) == _doc(uninterrupted)
    doc = _doc(out)
    assert doc["probes"]["warm_started"] == 4
    assert doc["probes"]["run"] == sum(c["num_probes"] for c in doc["configurations"])


def test_a_changed_plan_is_refused_not_reused(pool_plan, uninterrupted, write_plan, capsys):
    plan, _ = pool_plan
    plan = copy.deepcopy(plan)
    plan["slo"]["ttft_s"] = 0.06
    changed = write_plan(plan, "changed.yaml")
    assert main(["plan", changed, "--out", str(uninterrupted), "--resume", "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "computed for another plan" in lines[0]
    assert load_points(uninterrupted, load_plan(pool_plan[1]), fingerprint(load_plan(pool_plan[1])))
    # prices and the name do not change a record: those plans resume the points
    plan = copy.deepcopy(pool_plan[0])
    plan["prices"] = {"a100-80gb": 0.25}
    plan["name"] = "renamed"
    assert main(["plan", write_plan(plan, "repriced.yaml"), "--out", str(uninterrupted), "--resume"]) == 0
    assert "searched 0, reused 6" in capsys.readouterr().out
    doc = json.loads((uninterrupted / "plan.json").read_text())
    assert {c["price_per_gpu_hour"] for c in doc["configurations"]} == {0.25}


def test_force_starts_over_and_bad_point_files_are_one_line(pool_plan, uninterrupted, capsys):
    _, path = pool_plan
    assert main(["plan", path, "--out", str(uninterrupted), "--resume", "--force"]) == 2
    assert "give one" in capsys.readouterr().err
    (uninterrupted / "configs" / "0002.json").write_text("{not json")
    assert main(["plan", path, "--out", str(uninterrupted), "--resume", "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "0002.json: <json>: not valid JSON" in lines[0] and "delete it" in lines[0]
    (uninterrupted / "configs" / "0002.json").write_text(json.dumps(
        {"fingerprint": fingerprint(load_plan(path)), "record": {"index": 2}}))
    assert main(["plan", path, "--out", str(uninterrupted), "--resume", "--quiet"]) == 2
    assert "record.values: required key is missing" in capsys.readouterr().err
    before = _doc(uninterrupted)
    assert main(["plan", path, "--out", str(uninterrupted), "--force", "--quiet", "--workers", "1"]) == 0
    assert len(point_files(uninterrupted)) == 6 and _doc(uninterrupted) == before

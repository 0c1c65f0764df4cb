"""`sim sweep`: a point's id covers the files it reads; malformed point files on --resume;
the output folder is checked before anything runs; the default folder stays in sweeps/."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from sim.calib.calibration import calibration_file
from sim.cli.main import main
from sim.sweep.grid import plan_sweep, point_id
from sim.sweep.inputs import FileDigests, input_files
from sim.sweep.runner import points_dir

def tiny_llama_config() -> dict:
    from sim.model.hf_config import _presets

    return dict(_presets()["tiny-llama"])


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.fixture
def with_files(tmp_path, tiny_sweep_scenario):
    """A scenario reading a trace, a calibration YAML and a model config.json, all beside it."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(tiny_llama_config()))
    shutil.copy(calibration_file("a100-80gb"), tmp_path / "cal.yaml")
    (tmp_path / "trace.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                        + "".join(f"{i * 0.05},{40 + i},{10 + i}\n" for i in range(30)))
    data = {**tiny_sweep_scenario, "model": "m/config.json", "gpu": "cal.yaml"}
    data["workload"] = {"trace": {"path": "trace.csv"}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_files_a_point_reads_are_found_as_the_simulator_resolves_them(with_files):
    data = yaml.safe_load(with_files.read_text())
    found = input_files(data, str(with_files))
    d = with_files.parent.resolve()
    assert found == {"model": d / "m" / "config.json", "gpu": d / "cal.yaml", "workload.0": d / "trace.csv"}


def ids(scenario_path) -> list[str]:
    """The ids plan_sweep gives the points of kv.block_size=16,32 (valid or not)."""
    data = yaml.safe_load(scenario_path.read_text())
    return [point_id({**data, "kv": {**data["kv"], "block_size": b}}, FileDigests().of(data, str(scenario_path)))
            for b in (16, 32)]


@pytest.mark.parametrize("changed", ["trace.csv", "cal.yaml", "m/config.json"])
def test_a_changed_input_file_changes_every_point_id(with_files, changed):
    before = ids(with_files)
    path = with_files.parent / changed
    text = path.read_text()
    path.write_text(text + {"trace.csv": "9.0,50,5\n", "cal.yaml": "# recalibrated\n", "m/config.json": "\n"}[changed])
    after = ids(with_files)
    assert len(set(before)) == 2 and not set(before) & set(after)
    assert ids(with_files) == after  # stable


def test_plan_sweep_ids_cover_the_trace(with_files):
    data = yaml.safe_load(with_files.read_text())
    with_files.write_text(yaml.safe_dump({**data, "model": "tiny-llama"}))
    grid = ["kv.block_size=16,32"]
    before = [p.point_id for p in plan_sweep(str(with_files), grid).points]
    with open(with_files.parent / "trace.csv", "a") as f:
        f.write("9.0,50,5\n")
    after = [p.point_id for p in plan_sweep(str(with_files), grid).points]
    assert len(set(before)) == 2 and not set(before) & set(after)


def test_resume_reruns_points_after_the_trace_changed(with_files, tmp_path, capsys):
    data = yaml.safe_load(with_files.read_text())
    with_files.write_text(yaml.safe_dump({**data, "model": "tiny-llama"}))
    out = tmp_path / "sw"
    argv = ["sweep", str(with_files), "--grid", "kv.block_size=16,32", "--out", str(out), "--workers", "1"]
    assert main(argv) == 0
    with open(with_files.parent / "trace.csv", "a") as f:
        f.write("9.0,50,5\n")
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0
    assert "computed now 2, reused 0" in capsys.readouterr().out
    assert len(list(points_dir(out).glob("*.json"))) == 4


@pytest.fixture
def finished_sweep(tmp_path, tiny_sweep_scenario, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep_scenario))
    argv = ["sweep", str(path), "--grid", "kv.block_size=16,32", "--out", str(tmp_path / "sw"),
            "--workers", "1", "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    return argv


@pytest.mark.parametrize("edit, key", [
    (lambda rec: {"point_id": rec["point_id"]}, "values: required key is missing"),
    (lambda rec: {**rec, "summary": [1, 2]}, "summary: an ok point needs its summary object"),
    (lambda rec: {**rec, "status": "done"}, "status: got 'done'"),
    (lambda rec: [rec], "<top>: expected a JSON object"),
])
def test_a_malformed_point_file_on_resume_is_one_error_line_naming_it(finished_sweep, tmp_path, capsys,
                                                                      edit, key):
    victim = sorted(points_dir(tmp_path / "sw").glob("*.json"))[0]
    victim.write_text(json.dumps(edit(json.loads(victim.read_text()))))
    assert main(finished_sweep + ["--resume"]) == 2
    err = one_error_line(capsys)
    assert f"error: {victim}: {key}" in err and "delete it to rerun its point" in err


def test_without_resume_any_point_file_is_refused(finished_sweep, tmp_path, capsys):
    for p in points_dir(tmp_path / "sw").glob("*.json"):
        p.write_text("not json")
    assert main(finished_sweep) == 2
    assert "pass --resume" in one_error_line(capsys)


def test_out_an_existing_file_fails_before_anything_runs(tmp_path, tiny_sweep_scenario, capsys, monkeypatch):
    import sim.sweep.runner as runner

    monkeypatch.setattr(runner, "run_sweep", lambda *a, **k: pytest.fail("the sweep ran"))
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep_scenario))
    (tmp_path / "file").write_text("keep me")
    assert main(["sweep", str(path), "--grid", "kv.block_size=16,32", "--out", str(tmp_path / "file")]) == 2
    assert "file: --out: is an existing file" in one_error_line(capsys)
    assert (tmp_path / "file").read_text() == "keep me"


def test_default_folder_of_a_hostile_name_stays_in_sweeps(tmp_path, tiny_sweep_scenario, monkeypatch):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    path = work / "tiny.yaml"
    path.write_text(yaml.safe_dump({**tiny_sweep_scenario, "name": "../../x"}))
    assert main(["sweep", str(path), "--grid", "kv.block_size=16,32", "--workers", "1", "--quiet"]) == 0
    assert (work / "sweeps" / "x" / "results.csv").is_file()
    assert not (tmp_path / "x").exists() and not (work / "x").exists()

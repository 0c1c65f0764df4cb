"""Where `sim run`, `sim validate` and `sim compare` write, checked before any work: a
scenario's name never leaves runs/; --out an existing file or an unwritable folder fails at
once; a folder holding another run is refused unless --force, which removes its leftovers."""

from __future__ import annotations

import os

import pytest
import yaml

from sim.cli.main import main

GOOD = {
    "name": "outputs", "model": "tiny-llama", "gpu": "a100-80gb",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 64},
    "kv": {"allocator": "paged", "block_size": 16},
    "workload": {"num_requests": 4, "arrival": {"type": "constant", "rate": 10.0},
                 "prompt_tokens": {"type": "fixed", "value": 20},
                 "output_tokens": {"type": "fixed", "value": 5}},
}


def scenario(tmp_path, **changes):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**GOOD, **changes}))
    return str(path)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.fixture
def no_simulation(monkeypatch):
    """Fails the test if a simulation starts."""
    from sim.engine import simulation

    def refuse(*args, **kwargs):
        raise AssertionError("a simulation ran")

    monkeypatch.setattr(simulation.Simulation, "__init__", refuse)


@pytest.mark.parametrize("name, folder", [("../../x", "x"), ("/abs/path", "abs-path"), ("..", "scenario"),
                                          ("a b/c", "a-b-c")])
def test_a_scenario_name_is_one_safe_folder_inside_runs(tmp_path, monkeypatch, name, folder):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert main(["run", scenario(work, name=name), "--quiet", "--no-report"]) == 0
    assert (work / "runs" / folder / "summary.json").is_file()
    assert [p.name for p in (work / "runs").iterdir()] == [folder]
    assert not (tmp_path / "x").exists() and not (tmp_path / "abs").exists()


def test_out_an_existing_file_fails_before_any_simulation(tmp_path, capsys, no_simulation):
    target = tmp_path / "file.txt"
    target.write_text("keep")
    assert main(["run", scenario(tmp_path), "--out", str(target), "--quiet"]) == 2
    assert f"error: {target}: --out: is an existing file" in one_error_line(capsys)
    assert target.read_text() == "keep"


def test_out_below_a_file_fails_before_any_simulation(tmp_path, capsys, no_simulation):
    (tmp_path / "file.txt").write_text("keep")
    assert main(["run", scenario(tmp_path), "--out", str(tmp_path / "file.txt" / "sub"), "--quiet"]) == 2
    assert "file.txt is a file, not a folder" in one_error_line(capsys)


def test_an_unwritable_folder_fails_before_any_simulation(tmp_path, capsys, no_simulation, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if str(p) == str(locked)
                        else real_access(p, mode, **kw))  # root ignores permissions: deny it here
    assert main(["run", scenario(tmp_path), "--out", str(locked / "new"), "--quiet"]) == 2
    assert f"cannot write in {locked}" in one_error_line(capsys)


def test_a_rerun_is_refused_then_force_replaces_it_without_leftovers(tmp_path, capsys):
    out = tmp_path / "out"
    (out).mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["run", scenario(tmp_path), "--out", str(out), "--quiet"]) == 0
    assert (out / "report.html").is_file()
    before = (out / "summary.json").read_text()
    assert main(["run", scenario(tmp_path, name="other"), "--out", str(out), "--quiet", "--no-report"]) == 2
    err = one_error_line(capsys)
    assert "already holds another run's files" in err and "--force" in err
    assert (out / "summary.json").read_text() == before
    assert main(["run", scenario(tmp_path, name="other"), "--out", str(out), "--quiet", "--no-report",
                 "--force"]) == 0
    assert '"scenario": "other"' in (out / "summary.json").read_text()
    assert not (out / "report.html").exists()  # the old run's report is gone
    assert (out / "notes.txt").read_text() == "mine"  # files that are not a run's stay
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_sweep_folder_is_never_a_run_folder(tmp_path, capsys, no_simulation):
    (tmp_path / "sw" / "points").mkdir(parents=True)
    assert main(["run", scenario(tmp_path), "--out", str(tmp_path / "sw"), "--force", "--quiet"]) == 2
    assert "holds a sweep" in one_error_line(capsys)


def test_validate_checks_its_folder_before_any_work(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from validation import runner

    monkeypatch.setattr(runner, "simulate", lambda *a, **k: pytest.fail("validation ran"))
    target = tmp_path / "file.txt"
    target.write_text("keep")
    assert main(["validate", scenario(tmp_path), "--out", str(target), "--no-warmup"]) == 2
    assert "--out: is an existing file" in one_error_line(capsys)
    out = tmp_path / "v"
    out.mkdir()
    (out / "validation.json").write_text("{}")
    assert main(["validate", scenario(tmp_path), "--out", str(out), "--no-warmup"]) == 2
    assert "already holds another run's files (validation.json)" in one_error_line(capsys)


def test_compare_out_is_checked_before_reading_the_runs(tmp_path, capsys):
    runs = []
    for name in ("a", "b"):
        runs.append(str(tmp_path / name))
        assert main(["run", scenario(tmp_path, name=name), "--out", runs[-1], "--quiet", "--no-report"]) == 0
    assert main(["compare", *runs, "--out", str(tmp_path / "a"), "--quiet"]) == 2
    assert "--out: is a folder" in one_error_line(capsys)
    other = tmp_path / "notes.html"
    other.write_text("<p>mine</p>")
    assert main(["compare", *runs, "--out", str(other), "--quiet"]) == 2
    assert "not written by sim compare; pass --force" in one_error_line(capsys)
    assert other.read_text() == "<p>mine</p>"
    page = tmp_path / "compare.html"
    assert main(["compare", *runs, "--out", str(page), "--quiet"]) == 0
    assert main(["compare", *runs, "--out", str(page), "--quiet"]) == 0  # an earlier page is replaced
    assert main(["compare", *runs, "--out", str(other), "--quiet", "--force"]) == 0
    assert "kvsim compare" in other.read_text()

"""`sim run --steps full|sampled|none`: steps.csv in full, evenly sampled or left out;
summary.json is computed from every step, so it is the same in every mode."""

from __future__ import annotations

import json

import pytest
import yaml

import sim.outputs.files as files
from sim.cli.main import main

SCENARIO = {
    "name": "steps-modes", "model": "tiny-llama", "gpu": "a100-80gb",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 64},
    "kv": {"allocator": "paged", "block_size": 16},
    "workload": {"num_requests": 12, "arrival": {"type": "constant", "rate": 20.0},
                 "prompt_tokens": {"type": "fixed", "value": 40},
                 "output_tokens": {"type": "fixed", "value": 30}},
}


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return str(path)


def _run(scenario, out, *args: str) -> dict:
    assert main(["run", scenario, "--out", str(out), "--quiet", "--no-report", *args]) == 0
    summary = json.loads((out / "summary.json").read_text())
    summary.pop("sim_wall_s")  # the machine's, not the run's
    return summary


def _rows(path) -> list[str]:
    return path.read_text().splitlines()


def test_every_mode_has_the_same_summary_and_sampled_rows_are_every_kth_step(scenario, tmp_path,
                                                                               monkeypatch):
    full = _run(scenario, tmp_path / "full")
    assert _run(scenario, tmp_path / "default", "--steps", "full") == full
    all_rows = _rows(tmp_path / "full" / "steps.csv")
    n = len(all_rows) - 1
    assert n == full["engine"]["num_steps"] > 20

    assert _run(scenario, tmp_path / "sampled-all", "--steps", "sampled") == full
    assert _rows(tmp_path / "sampled-all" / "steps.csv") == all_rows  # under the cap: every step

    monkeypatch.setitem(files.STEP_MODES, "sampled", 7)
    assert _run(scenario, tmp_path / "sampled", "--steps", "sampled") == full
    rows = _rows(tmp_path / "sampled" / "steps.csv")
    k = -(-n // 7)
    assert rows[0] == all_rows[0] and 1 < len(rows) - 1 <= 7
    assert rows[1:] == all_rows[1::k]  # steps 0, k, 2k, ... of the full log, unchanged

    assert _run(scenario, tmp_path / "none", "--steps", "none") == full
    assert sorted(p.name for p in (tmp_path / "none").iterdir()) == ["requests.csv", "summary.json"]


def test_none_with_force_removes_an_earlier_runs_steps_csv(scenario, tmp_path):
    out = tmp_path / "run"
    _run(scenario, out)
    assert (out / "steps.csv").exists()
    _run(scenario, out, "--steps", "none", "--force")
    assert not (out / "steps.csv").exists() and (out / "requests.csv").exists()


def test_an_unknown_mode_is_one_error_line(scenario, tmp_path, capsys):
    assert main(["run", scenario, "--out", str(tmp_path / "x"), "--steps", "some"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "--steps" in err
    assert not (tmp_path / "x").exists()

"""Tensor parallelism end to end: `sim run` with engine.tensor_parallel_size, its one-line
errors (exit 2), and `sim kv --tp`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sim.cli.main import main

REPO = Path(__file__).resolve().parents[3]
GOOD = {
    "name": "tp", "model": "tiny-llama", "gpu": "h100-sxm",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 64},
    "kv": {"allocator": "paged", "block_size": 16},
    "workload": {"num_requests": 6, "arrival": {"type": "constant", "rate": 10.0},
                 "prompt_tokens": {"type": "fixed", "value": 40},
                 "output_tokens": {"type": "fixed", "value": 8}},
}


def _write(tmp_path: Path, **engine) -> Path:
    data = {**GOOD, "engine": {**GOOD["engine"], **engine}}
    path = tmp_path / "tp.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(tmp_path: Path, path: Path, out: str, *sets: str) -> int:
    argv = ["run", str(path), "--out", str(tmp_path / out), "--quiet", "--no-report"]
    for s in sets:
        argv += ["--set", s]
    return main(argv)


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_tp_1_runs_exactly_as_without_the_key(tmp_path) -> None:
    assert _run(tmp_path, _write(tmp_path), "a") == 0
    assert _run(tmp_path, _write(tmp_path, tensor_parallel_size=1), "b") == 0
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("a", "b"))
    a.pop("sim_wall_s"), b.pop("sim_wall_s")
    assert a == b
    assert (tmp_path / "a" / "steps.csv").read_bytes() == (tmp_path / "b" / "steps.csv").read_bytes()


def test_tp_2_runs_and_pays_for_its_all_reduces(tmp_path) -> None:
    # tiny-llama's device steps are shorter than vllm-v1's host time: with async scheduling (the
    # profile's default) the host's time would hide the all-reduces, so the host runs in series here
    path = _write(tmp_path, profile_overrides={"async_scheduling": False})
    assert _run(tmp_path, path, "one") == 0
    assert _run(tmp_path, path, "two", "engine.tensor_parallel_size=2") == 0
    one, two = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("one", "two"))
    assert two["requests"]["completed"] == 6
    # tiny-llama is all overhead: half of nothing saved, 2 x 2 + 1 all-reduces and a gather added
    assert two["engine"]["busy_s"] > one["engine"]["busy_s"]


@pytest.mark.parametrize(("value", "fragment"), [
    ("3", "engine.tensor_parallel_size: Input should be 1, 2, 4 or 8"),
    ("true", "engine.tensor_parallel_size: expected 1, 2, 4 or 8"),
    ("8", "engine.tensor_parallel_size: 8 does not divide tiny-llama's 4 attention heads; allowed for this model: 1, 2, 4"),
])
def test_bad_tp_is_one_error_line(tmp_path, capsys, value: str, fragment: str) -> None:
    path = _write(tmp_path)
    assert _run(tmp_path, path, "out", f"engine.tensor_parallel_size={value}") == 2
    line = _one_error(capsys)
    assert str(path) in line and fragment in line


def test_tp_on_a_calibration_without_interconnect_is_one_error_line(tmp_path, capsys) -> None:
    path = _write(tmp_path)
    assert _run(tmp_path, path, "out", "gpu=cpu-epyc-2core", "engine.tensor_parallel_size=2") == 2
    line = _one_error(capsys)
    assert "cpu-epyc-2core.yaml: interconnect:" in line and "tensor_parallel_size 2" in line


def test_70b_on_one_h100_does_not_fit_and_on_four_does(tmp_path, capsys) -> None:
    path = tmp_path / "big.yaml"
    data = {**GOOD, "model": "llama-3-70b", "engine": {"max_model_len": 4096}}
    data["workload"] = {**GOOD["workload"], "num_requests": 2}
    path.write_text(yaml.safe_dump(data))
    assert _run(tmp_path, path, "one") == 2
    assert "no memory left for the KV cache" in _one_error(capsys)
    assert _run(tmp_path, path, "four", "engine.tensor_parallel_size=4") == 0


def test_sim_kv_tp_4_shows_the_per_gpu_plan(capsys) -> None:
    argv = ["kv", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--max-model-len", "8192", "--tp", "4", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tensor_parallel_size"] == 4 and out["kv_heads_per_gpu"] == 2
    assert out["bytes_per_token"] == 327680 and out["bytes_per_token_per_gpu"] == 81920
    assert out["weight_bytes_per_gpu"] == pytest.approx(out["weight_bytes"] / 4, rel=1e-4)
    assert out["pool_tokens"] == 16 * out["num_gpu_blocks"]
    assert out["num_gpu_blocks"] == out["kv_pool_bytes"] // (16 * 81920)
    assert out["total_kv_pool_bytes"] == 4 * out["kv_pool_bytes"]
    assert main(argv[:-1]) == 0  # the table
    table = capsys.readouterr().out
    assert "KV heads per GPU" in table and "weights per GPU" in table and "KV pool, all GPUs" in table


@pytest.mark.parametrize("tp", ["3", "x", "0"])
def test_sim_kv_bad_tp_is_one_error_line(capsys, tp: str) -> None:
    assert main(["kv", "--model", "llama-3-70b", "--tp", tp]) == 2
    assert "--tp" in _one_error(capsys)


def test_the_shipped_tp_scenario_loads() -> None:
    from sim.config.scenario import load_scenario
    from sim.engine.parts import build_plan

    sc = load_scenario(str(REPO / "scenarios" / "llama3-70b-tp.yaml"))
    assert sc.engine.tensor_parallel_size == 4 and sc.engine.profile == "vllm-v1"
    _, cal, plan = build_plan(sc)
    assert plan.tensor_parallel_size == 4 and cal.interconnect.link == "nvlink4"

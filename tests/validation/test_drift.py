"""The calibration check of ``sim validate``: re-time recorded whole steps, report now / then."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from sim.calib.calibration import calibration_to_dict, load_calibration  # noqa: E402
from validation.drift import MAX_STEPS, calibration_drift, reference_steps  # noqa: E402

TINY = dict(hidden_size=64, num_q_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128, vocab_size=256,
            dtype="bf16")


def _write(tmp_path: Path, cuda: str = "none", then_s: float = 1.0, n: int = 3) -> Path:
    """A calibration whose raw timings say ``n`` tiny-model steps took ``then_s`` each."""
    device = {"record": "device", "name": "t", "gpu_name": "t", "memory_bytes": 1 << 30,
              "provenance": {"cuda": cuda}}
    steps = [{"kernel": "forward", **TINY, "num_layers": 1, "decode_seqs": b, "decode_context": 16,
              "prefill_seqs": 0, "prefill_query": 0, "prefill_context": 0, "time_s": then_s * (1 + b / 100)}
             for b in range(1, n + 1)]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in [device, *steps]) + "\n")
    data = calibration_to_dict(load_calibration("cpu-epyc-2core"))
    data["name"], data["provenance"] = "t", {**data["provenance"], "measurements": "t.jsonl"}
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_check_retimes_the_recorded_steps(tmp_path: Path) -> None:
    path = _write(tmp_path, then_s=0.05)
    drift = calibration_drift(load_calibration(str(path)), path, torch.device("cpu"))
    assert drift["num_steps"] == 3 and len(drift["steps"]) == 3
    # a 1-layer, 64-wide model steps in well under 50 ms: "now" is much faster than "then"
    assert 0 < drift["ratio"] < 1
    assert all(s["now_s"] > 0 and s["ratio"] == pytest.approx(s["now_s"] / s["then_s"]) for s in drift["steps"])


def test_no_check_without_steps_from_this_kind_of_device(tmp_path: Path) -> None:
    path = _write(tmp_path, cuda="12.4")  # measured on a GPU
    assert calibration_drift(load_calibration(str(path)), path, torch.device("cpu")) is None
    assert calibration_drift(load_calibration("a100-80gb"), None, torch.device("cpu")) is None  # datasheet


def test_reference_steps_are_few_short_and_of_the_model_when_it_was_measured(tmp_path: Path) -> None:
    jsonl = Path(load_calibration("cpu-epyc-2core").provenance["measurements"])
    shipped = Path(__file__).resolve().parents[2] / "calibrations" / jsonl
    from sim.model.hf_config import load_model

    llama = load_model(str(Path(__file__).resolve().parents[2] / "scenarios/models/validate-llama/config.json"))
    steps = reference_steps(shipped, "cpu", llama)
    assert 2 <= len(steps) <= MAX_STEPS and all(s["time_s"] <= 0.1 for s in steps)
    assert {s["hidden_size"] for s in steps} == {llama.hidden_size}
    assert reference_steps(shipped, "cuda") == []


def test_recalibration_is_advised_when_the_median_or_any_step_moved() -> None:
    from validation.drift import needs_recalibration

    assert not needs_recalibration({"ratio": 1.04, "min_ratio": 0.95, "max_ratio": 1.15})
    assert needs_recalibration({"ratio": 1.11, "min_ratio": 1.04, "max_ratio": 1.15})  # the median
    assert needs_recalibration({"ratio": 1.04, "min_ratio": 1.01, "max_ratio": 1.39})  # the small steps
    assert needs_recalibration({"ratio": 0.97, "min_ratio": 0.75, "max_ratio": 1.0})

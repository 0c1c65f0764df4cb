"""A calibration's ``gemm_fixed_s``: each GEMM kernel's fixed device time in the datasheet roofline
(sim/cost/datasheet.py), overlapped by the host's launch or a graph replay's gap."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration
from sim.cost.build import build_cost_model, build_profiled_cost
from sim.cost.profile import GRAPH_KERNEL_S, PROFILES
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model
from sim.model.spec import linear_ops

ROOT = Path(__file__).resolve().parents[3]


def gemm_kernels(model) -> int:
    """GEMM launches of one step: every layer's linear ops and the lm_head."""
    return sum(op.num_layers for op in linear_ops(model)) + 1


def a100(fixed: float):
    return dataclasses.replace(load_calibration("a100-80gb"), gemm_fixed_s=fixed)


@pytest.mark.parametrize("shape", [BatchShape.decode(1, 1500), BatchShape.decode(64, 900), BatchShape.prefill(512, 0)])
def test_each_gemm_costs_the_longer_of_its_launch_and_its_fixed_time(shape) -> None:
    model = load_model("qwen2.5-7b")
    launch = load_calibration("a100-80gb").kernel_launch_s
    base = build_cost_model(model, a100(0.0)).step_time_s(shape)
    assert build_cost_model(model, a100(launch / 2)).step_time_s(shape) == pytest.approx(base, rel=1e-12)
    fixed = launch + 3e-6
    longer = build_cost_model(model, a100(fixed)).step_time_s(shape)
    assert longer - base == pytest.approx(gemm_kernels(model) * 3e-6, rel=1e-9)


def test_a_graph_replay_pays_the_fixed_time_beyond_its_kernel_gap() -> None:
    model, shape = load_model("qwen2.5-7b"), BatchShape.decode(1, 1500)
    prof = PROFILES["vllm-v1"]

    def step(fixed):
        return build_profiled_cost(model, a100(fixed), prof, max_num_seqs=256).device_time_s(shape)

    assert step(6.2e-6) - step(0.0) == pytest.approx(gemm_kernels(model) * (6.2e-6 - GRAPH_KERNEL_S), rel=1e-9)
    assert step(6.2e-6) / step(0.0) - 1 == pytest.approx(0.06, abs=0.02)  # ~0.55 ms of a ~9.3 ms batch-1 step


def test_the_key_is_optional_checked_and_kept_by_the_round_trip() -> None:
    data = calibration_to_dict(load_calibration("a100-80gb"))
    assert data["gemm_fixed_s"] == load_calibration("a100-80gb").gemm_fixed_s > 0
    assert calibration_from_dict(data, file="x.yaml").gemm_fixed_s == data["gemm_fixed_s"]
    data.pop("gemm_fixed_s")
    assert calibration_from_dict(data, file="x.yaml").gemm_fixed_s == 0.0
    assert "gemm_fixed_s" not in calibration_to_dict(calibration_from_dict(data, file="x.yaml"))
    for bad in (-1e-6, 0.5, "fast"):
        with pytest.raises(ConfigError, match="gemm_fixed_s"):
            calibration_from_dict({**data, "gemm_fixed_s": bad}, file="x.yaml")


def test_the_tables_fit_recovers_a_known_fixed_time() -> None:
    spec = importlib.util.spec_from_file_location("gemv_fixed_time", ROOT / "benchmarks" / "gemv" / "fixed_time.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    nbytes = np.geomspace(8e6, 2e9, 40)
    t = (5e-6 + nbytes / 1.6e12) * (1 + 0.02 * np.sin(np.arange(40)))  # 2% noise
    t0, before, after = mod.fixed_time(nbytes, t, 1.6e12)
    assert t0 == pytest.approx(5e-6, rel=0.1)
    assert after < before
    assert mod.datasheet_bandwidth("a100-80gb") == pytest.approx(2.039e12 * 0.79)


@pytest.mark.parametrize("name", ["compiled", "lmdeploy"])
def test_engines_with_their_own_gemvs_do_not_pay_it(name) -> None:
    model, shape = load_model("llama-2-7b"), BatchShape.decode(1, 500)

    def step(profile, fixed):
        return build_profiled_cost(model, a100(fixed), PROFILES[profile], max_num_seqs=64).device_time_s(shape)

    assert step(name, 6.2e-6) == step(name, 0.0)
    assert step("sglang", 6.2e-6) > step("sglang", 0.0)

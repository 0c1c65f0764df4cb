"""benchmarks/moe_kernels/large_tokens.py charges the MoE layer's non-GEMM traffic as kvsim's step does."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sim.calib.calibration import load_calibration
from sim.model.hf_config import load_model
from sim.model.spec import moe_routing_bytes_per_token

# large_tokens.py puts its own folder on sys.path for fit_expert_m_half
_spec = importlib.util.spec_from_file_location(
    "large_tokens", Path(__file__).resolve().parents[2] / "benchmarks" / "moe_kernels" / "large_tokens.py")
lt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lt)


@pytest.mark.parametrize("name", ["mixtral-8x7b", "qwen3-30b-a3b"])
def test_layer_traffic_is_the_steps_routing_and_activation_bytes(name):
    model = load_model(name)
    k, inter = model.num_experts_per_tok, model.moe_intermediate_size
    per_layer = lt.layer_traffic_bytes(1, k, model.num_experts, k, model.hidden_size, inter, True)
    routing = moe_routing_bytes_per_token(model, 2.0) / model.num_moe_layers
    activation = 3 * inter * k * 2.0  # elementwise_bytes_per_token's routed-expert term, a layer
    assert per_layer == pytest.approx(routing + activation)
    # routed elsewhere (expert parallelism): no top-k on this GPU, the rows' traffic only
    assert lt.layer_traffic_bytes(1, k, model.num_experts, k, model.hidden_size, inter, False) \
        == pytest.approx(per_layer - model.num_experts * 2.0 - 8 * k)


def test_the_traffic_is_what_moves_the_large_token_rows():
    row = {"gpu": "L40S", "dtype": "fp8 w8a8", "scope": "whole-moe", "time_us": "9399.8", "num_experts": "256",
           "top_k": "8", "hidden": "2048", "inter_per_gpu": "512", "num_tokens": "32768", "tp_or_ep": "TP1"}
    with_traffic, measured = lt.predict(row)
    gemm_only, _ = lt.predict(row, gemm_only=True)
    l40s = load_calibration("l40s")
    traffic_s = lt.layer_traffic_bytes(32768, 32768 * 8, 256, 8, 2048, 512, True) \
        / (l40s.hbm_bandwidth_bytes_per_s * l40s.bandwidth_efficiency)
    assert with_traffic - gemm_only == pytest.approx(traffic_s, rel=1e-9)
    assert gemm_only < measured < with_traffic  # the row lies between the two readings

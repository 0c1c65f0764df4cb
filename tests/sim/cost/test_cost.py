"""Cost model: exact on a tiny world, sane on real GPUs, monotone everywhere."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calib.calibration import Calibration, CalibrationSource, load_calibration
from sim.calib.kernel_models import RIDGE_SHARPNESS
from sim.cost.base import decode_step_time_s, prefill_time_s
from sim.cost.build import build_cost_model
from sim.cost.datasheet import NON_GEMM_KERNELS_PER_LAYER, DatasheetCost
from sim.cost.fitted import FittedCost
from sim.cost.shape import BatchShape
from sim.model.hf_config import load_model
from sim.model.spec import elementwise_bytes_per_token
from sim.model.weights import weight_bytes

UNIT = Calibration(name="unit", source=CalibrationSource.MEASURED, gpu_name="unit", memory_bytes=1 << 30,
                   hbm_bandwidth_bytes_per_s=1e9, bandwidth_efficiency=1.0, peak_flops=1e12,
                   compute_eff_max=1.0, compute_m_half_tokens=0.0, pcie_bandwidth_bytes_per_s=1e9,
                   kernel_launch_s=0.0, step_overhead_s=0.0)


def step(cm, **kw):
    args = dict(num_seqs=0, num_prefill_tokens=0, num_decode_tokens=0, decode_kv_tokens=0,
                prefill_attn_pairs=0, prefill_kv_tokens=0)
    return cm.step_time_s(BatchShape(**(args | kw)))


def test_tiny_decode_is_weights_plus_traffic_over_bandwidth() -> None:
    model = load_model("tiny-llama")
    cm = build_cost_model(model, UNIT)
    embed = 1024 * 256 * 2  # the embedding table is looked up, not streamed
    moved = weight_bytes(model) - embed - 5 * 256 * 2  # norms are in the elementwise traffic
    expected = (moved + elementwise_bytes_per_token(model, 2, 1024) + 10 * 1024) / 1e9
    hard = dataclasses.replace(cm, ridge_sharpness=math.inf)  # the roofline's hard max: bytes only
    assert decode_step_time_s(hard, batch_size=1, context_tokens=10) == pytest.approx(expected, rel=1e-12)
    # the smooth roofline (RIDGE_SHARPNESS) adds each GEMM's math share, (1 + (f/w)^p)^(1/p): tiny at m = 1
    t = decode_step_time_s(cm, batch_size=1, context_tokens=10)
    assert cm.ridge_sharpness == RIDGE_SHARPNESS and expected < t < expected * 1.01


def test_tiny_fixed_costs_are_overhead_and_launches() -> None:
    cal = dataclasses.replace(UNIT, kernel_launch_s=1e-6, step_overhead_s=1e-3)
    model = load_model("tiny-llama")
    base = decode_step_time_s(build_cost_model(model, UNIT), batch_size=1, context_tokens=10)
    kernels = 2 * (4 + NON_GEMM_KERNELS_PER_LAYER + 1) + 1  # 4 GEMMs, others, attention; lm_head
    t = decode_step_time_s(build_cost_model(model, cal), batch_size=1, context_tokens=10)
    assert t == pytest.approx(base + 1e-3 + kernels * 1e-6, rel=1e-12)


def test_empty_step_is_free() -> None:
    cm = build_cost_model(load_model("llama-3-8b"), load_calibration("h100-sxm"))
    assert step(cm) == 0.0 and prefill_time_s(cm, 100, num_cached_tokens=100) == 0.0


def test_llama_3_8b_h100_decode_is_weights_over_bandwidth() -> None:
    cal = load_calibration("h100-sxm")
    model = load_model("llama-3-8b")
    cm = build_cost_model(model, cal)
    floor_s = weight_bytes(model) / cal.effective_bandwidth_bytes_per_s  # ~5.8 ms
    t = decode_step_time_s(cm, batch_size=1, context_tokens=128)
    assert 5e-3 < floor_s < 7e-3
    assert floor_s < t < floor_s + cal.step_overhead_s + 2e-3


def test_decode_grows_linearly_with_kv_tokens() -> None:
    cm = build_cost_model(load_model("llama-3-8b"), load_calibration("h100-sxm"))
    times = [step(cm, num_seqs=32, num_decode_tokens=32, decode_kv_tokens=k) for k in (0, 10_000, 20_000, 40_000)]
    slope = (times[1] - times[0]) / 10_000
    assert slope == pytest.approx(131072 / (3.35e12 * 0.83))
    assert times[3] - times[0] == pytest.approx(4 * (times[1] - times[0]))


def test_prefill_2048_is_compute_bound() -> None:
    cal = load_calibration("h100-sxm")
    model = load_model("llama-3-8b")
    cm = build_cost_model(model, cal)
    t = prefill_time_s(cm, 2048)
    memory_s = weight_bytes(model) / cal.effective_bandwidth_bytes_per_s
    compute_s = 2 * model.num_params * 2048 / (cal.peak_flops * cal.compute_efficiency(2048))
    assert t > 5 * memory_s
    assert compute_s < t < 1.5 * compute_s
    # A cached prefix makes the same prompt cheaper.
    assert prefill_time_s(cm, 2048, num_cached_tokens=1024) < t


def test_moe_decode_reads_only_routed_experts() -> None:
    cal = load_calibration("h100-sxm")
    model = load_model("deepseek-v2-lite")
    cm = build_cost_model(model, cal)
    one = decode_step_time_s(cm, batch_size=1, context_tokens=128)
    full = weight_bytes(model) / cal.effective_bandwidth_bytes_per_s
    active = 2 * model.num_active_params / cal.effective_bandwidth_bytes_per_s
    assert active < one < full
    # A big batch touches nearly every expert.
    assert decode_step_time_s(cm, batch_size=256, context_tokens=128) > full


def test_swap_1_gib_over_pcie_gen4() -> None:
    cm = build_cost_model(load_model("llama-3-8b"), load_calibration("a100-80gb"))
    assert 40e-3 <= cm.swap_time_s(1 << 30) <= 50e-3
    assert cm.swap_time_s(0) == 0.0


counts = st.integers(min_value=0, max_value=4096)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["tiny-llama", "llama-3-8b", "deepseek-v2-lite", "opt-13b"]),
       counts, counts, counts, st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**5),
       st.sampled_from(["num_seqs", "num_prefill_tokens", "num_decode_tokens", "decode_kv_tokens",
                        "prefill_attn_pairs", "prefill_kv_tokens"]), st.integers(1, 1000))
def test_step_time_is_monotone_in_every_argument(name, seqs, prefill, decode, kv, pairs, pkv, field, extra):
    cm = _cost_model(name)
    args = dict(num_seqs=seqs, num_prefill_tokens=prefill, num_decode_tokens=decode,
                decode_kv_tokens=kv, prefill_attn_pairs=pairs, prefill_kv_tokens=pkv)
    before = cm.step_time_s(BatchShape(**args))
    after = cm.step_time_s(BatchShape(**(args | {field: args[field] + extra})))
    assert after >= before >= 0.0


_CACHE: dict = {}


def _cost_model(name: str):
    if name not in _CACHE:
        _CACHE[name] = build_cost_model(load_model(name), load_calibration("a100-80gb"))
    return _CACHE[name]


# -- measured calibrations: the step composed from fitted kernel models ---------------------

def _measured():
    return load_calibration("cpu-epyc-2core")


def test_measured_calibration_uses_fitted_kernels() -> None:
    cal = _measured()
    model = load_model("tiny-llama")
    cm = build_cost_model(model, cal)
    assert isinstance(cm, FittedCost)
    assert isinstance(build_cost_model(model, load_calibration("a100-80gb")), DatasheetCost)
    m = 8
    gemms = sum(op.num_layers * cal.predict("gemm", m=m, n=op.n, k=op.k, dtype="bf16")
                for op in __import__("sim.model.spec", fromlist=["linear_ops"]).linear_ops(model))
    t = step(cm, num_seqs=m, num_decode_tokens=m, decode_kv_tokens=m * 100)
    assert t > gemms + cal.predict("step", num_seqs=m, vocab_size=model.vocab_size)
    assert cm.swap_time_s(1 << 20) == pytest.approx(
        0.5 * (cal.predict("copy_h2d", num_bytes=1 << 20, pinned=True)
               + cal.predict("copy_d2h", num_bytes=1 << 20, pinned=True)))


@settings(max_examples=60, deadline=None)
@given(base=st.tuples(*[st.integers(0, 4000)] * 5), chunks=st.integers(0, 64), which=st.integers(0, 5),
       extra=st.integers(1, 3000))
def test_fitted_step_time_is_monotone(base, chunks, which, extra) -> None:
    cm = build_cost_model(load_model("qwen2.5-1.5b"), _measured())
    seqs, prefill, decode, kv, pairs = base
    args = dict(num_seqs=seqs, num_prefill_tokens=prefill, num_decode_tokens=decode,
                decode_kv_tokens=kv, prefill_attn_pairs=pairs, prefill_kv_tokens=prefill, num_prefill_seqs=chunks)
    key = list(args)[which]
    bigger = dict(args, **{key: args[key] + extra})
    assert step(cm, **bigger) >= step(cm, **args) - 1e-15


def test_smooth_roofline_by_hand() -> None:
    from sim.cost.datasheet import smax
    assert smax(3.0, 0.0, 1.5) == 3.0 and smax(0.0, 2.0, 1.5) == 2.0 and smax(3.0, 4.0, math.inf) == 4.0
    assert smax(1.0, 1.0, 1.5) == pytest.approx(2 ** (1 / 1.5))  # at the ridge: 1.59x the larger
    assert smax(2.0, 1.0, 2.0) == pytest.approx(math.sqrt(5.0)) and smax(1.0, 2.0, 2.0) == smax(2.0, 1.0, 2.0)
    assert 4.0 < smax(4.0, 0.4, 1.5) < 4.0 * 1.04  # far from the ridge: close to the max


def test_a_gemm_at_the_ridge_costs_more_than_the_hard_roofline() -> None:
    # Llama-3-8B on an A100 at m = 128, near its ridge: the smooth roofline charges 10-60% more
    # for the GEMMs than the hard max (real A100 timings, Vidur: 12.1 ms for its 32 layers' linears)
    cm = build_cost_model(load_model("llama-3-8b"), load_calibration("a100-80gb"))
    hard = dataclasses.replace(cm, ridge_sharpness=math.inf)
    ratio = prefill_time_s(cm, 128) / prefill_time_s(hard, 128)
    assert 1.1 < ratio < 2 ** (1 / RIDGE_SHARPNESS)
    assert prefill_time_s(cm, 8192) / prefill_time_s(hard, 8192) < ratio  # compute-bound: the max dominates

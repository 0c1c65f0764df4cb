"""Precision-aware compute in both cost models, and the MoE routing cost."""

from __future__ import annotations

import dataclasses
import random

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.base import decode_step_time_s, prefill_time_s
from sim.cost.build import build_cost_model
from sim.cost.datasheet import DatasheetCost, build_datasheet_cost, smax
from sim.cost.fitted import FittedCost, build_fitted_cost
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model
from sim.model.spec import (
    MOE_ROUTING_KERNELS_PER_LAYER, elementwise_bytes_per_token, kv_bytes_per_token, moe_routing_bytes_per_token)

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5, "fp4": 0.5625}


def cost(gpu, model="llama-3-8b", weights="bf16", compute=None, **replace):
    cal = load_calibration(gpu) if isinstance(gpu, str) else gpu
    cal = dataclasses.replace(cal, **replace) if replace else cal
    return build_cost_model(load_model(model), cal, "bf16", DTYPE_BYTES[weights], weight_dtype=weights,
                            compute_dtype=compute)


def legacy(gpu: str):
    """The calibration without its compute_peaks and dequant sections."""
    return dataclasses.replace(load_calibration(gpu), precision=None)


def random_shapes(n: int = 300):
    rng = random.Random(0)
    for _ in range(n):
        yield BatchShape(rng.randint(0, 64), rng.randint(0, 8192), rng.randint(0, 256), rng.randint(0, 10**6),
                         rng.random() * 1e7, rng.randint(0, 10**5), rng.randint(0, 8))


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm", "rtx-4090", "rtx-4060-8gb", "l40s"])
@pytest.mark.parametrize("weights", ["bf16", "fp16"])
def test_sixteen_bit_runs_are_identical_with_or_without_the_new_keys(gpu: str, weights: str) -> None:
    new, old = cost(gpu, weights=weights), cost(legacy(gpu), weights=weights)
    assert all(new.step_time_s(s) == old.step_time_s(s) for s in random_shapes())


def test_a_calibration_without_the_new_keys_charges_as_before() -> None:
    # the legacy charge: weights over the bandwidth, activations in the weight dtype, every mode at peak_flops
    cal, model = legacy("h100-sxm"), load_model("llama-3-8b")
    for weights in ("int8", "int4", "fp8"):
        b = DTYPE_BYTES[weights]
        base = cost(cal, weights=weights)
        kv = kv_bytes_per_token(model, "bf16")
        assert base.elementwise_s_per_token == elementwise_bytes_per_token(model, b, kv) / cal.effective_bandwidth_bytes_per_s
        assert base.dense_ops[0][0] == 4096 * 6144 * b * 32 / cal.effective_bandwidth_bytes_per_s
        for mode in ("bf16", "fp16", "fp16-acc16", "fp8", "int8"):
            other = cost(cal, weights=weights, compute=mode)
            assert all(other.step_time_s(s) == base.step_time_s(s) for s in random_shapes(50))


def test_fp8_compute_halves_a_compute_bound_prefill_on_h100() -> None:
    eff = load_calibration("h100-sxm").precision.mode_efficiency["fp8"]  # fp8 GEMMs' share of bf16's efficiency
    bf16, fp8 = cost("h100-sxm", weights="bf16"), cost("h100-sxm", weights="fp8")
    assert fp8.compute_dtype == "fp8" and bf16.compute_dtype == "bf16"
    for (_, f16, _), (_, f8, _) in zip(bf16.dense_ops, fp8.dense_ops):
        assert f16 / f8 == pytest.approx(1979 / 989 * eff)
    ratio = prefill_time_s(bf16, 8192) / prefill_time_s(fp8, 8192)
    assert 1.4 < ratio < 2.0 * eff  # the GEMMs run 2 x eff as fast; attention and norms do not
    peak_only = cost("h100-sxm", weights="fp8", precision=dataclasses.replace(
        load_calibration("h100-sxm").precision, mode_efficiency=None))
    assert 1.6 < prefill_time_s(bf16, 8192) / prefill_time_s(peak_only, 8192) < 2.0  # at the datasheet ratio


def test_fp4_on_b200_runs_its_gemms_at_the_fp4_rate_and_reads_nvfp4_bytes() -> None:
    cal = load_calibration("b200")
    eff = cal.precision.mode_efficiency
    fp8, fp4 = cost("b200", weights="fp8"), cost("b200", weights="fp4")
    assert (fp8.compute_dtype, fp4.compute_dtype) == ("fp8", "fp4")
    for (w8, f8, _), (w4, f4, _) in zip(fp8.dense_ops, fp4.dense_ops):
        assert w4 / w8 == pytest.approx(0.5625)  # 4-bit values plus an 8-bit scale per 16
        assert f8 / f4 == pytest.approx(9.0 / 4.5 * eff["fp4"] / eff["fp8"])
    assert prefill_time_s(fp4, 8192) < prefill_time_s(fp8, 8192)
    assert decode_step_time_s(fp4, batch_size=1, context_tokens=512) < decode_step_time_s(fp8, batch_size=1,
                                                                                          context_tokens=512)
    with pytest.raises(ConfigError) as err:  # Hopper has no fp4 tensor cores
        cost("h100-sxm", weights="fp4", compute="fp4")
    assert err.value.key == "compute_peaks.fp4"


def test_fp8_compute_on_a100_is_an_error_naming_the_file_and_modes() -> None:
    with pytest.raises(ConfigError) as err:
        cost("a100-80gb", weights="fp8", compute="fp8")
    assert err.value.key == "compute_peaks.fp8" and err.value.file.endswith("a100-80gb.yaml")
    assert "it has: bf16, fp16, fp16-acc16, int8" in err.value.message
    assert cost("a100-80gb", weights="fp8").compute_dtype == "bf16"  # None: weight-only fp8 (Marlin)


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-sxm", "rtx-4090"])
@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_weight_only_decode_pays_the_dequant_factor(gpu: str, weights: str) -> None:
    eff = load_calibration(gpu).precision.dequant[weights]
    cm = cost(gpu, weights=weights)
    pure = cost(gpu, weights=weights, precision=dataclasses.replace(load_calibration(gpu).precision, dequant=None))
    for (w, _, _), (w0, _, _) in zip(cm.dense_ops, pure.dense_ops):
        assert w == pytest.approx(w0 / eff, rel=1e-12)
    t, t0 = (decode_step_time_s(c, batch_size=1, context_tokens=512) for c in (cm, pure))
    m_half, p = cm.m_half_tokens, cm.ridge_sharpness  # each GEMM: the smooth max of its (dequantised)
    extra = sum(smax(w, f * (1 + m_half), p) - smax(w0, f * (1 + m_half), p)  # weight read and its compute
                for (w, f, _), (w0, _, _) in zip((*cm.dense_ops, cm.lm_head), (*pure.dense_ops, pure.lm_head)))
    assert t - t0 == pytest.approx(extra, rel=1e-9, abs=1e-15)
    assert 1.0 <= t / t0 <= 1 / eff


def test_int8_weight_only_is_about_sixteen_percent_slower_than_its_bytes() -> None:
    # a decode step of Llama-3-8B int8 weights on an H100: W8A16 vs the pure-bytes figure
    cm, pure = cost("h100-sxm", weights="int8"), cost("h100-sxm", weights="int8", compute="int8")
    assert cm.compute_dtype == "bf16" and pure.compute_dtype == "int8"
    busy = [decode_step_time_s(c, batch_size=1, context_tokens=512) - c.fixed_step_s for c in (cm, pure)]
    assert 1.12 < busy[0] / busy[1] < 1 / 0.85  # the weights dominate; KV and norms pay no dequant


def test_w8a8_int8_reads_bytes_at_full_bandwidth_and_computes_at_the_int8_peak() -> None:
    cal = load_calibration("h100-sxm")
    cm = cost("h100-sxm", weights="int8", compute="int8")
    assert cm.dense_ops[0][0] == 4096 * 6144 * 1 * 32 / cal.effective_bandwidth_bytes_per_s
    assert cm.dense_ops[0][1] == pytest.approx(2 * 4096 * 6144 * 32 / (1979e12 * cal.compute_eff_max))


def test_fp16_accumulate_doubles_geforce_gemms_only() -> None:
    fp16, acc16 = cost("rtx-4090", weights="fp16"), cost("rtx-4090", weights="fp16", compute="fp16-acc16")
    assert all(a[1] == pytest.approx(b[1] / 2, rel=1e-3) for a, b in zip(acc16.dense_ops, fp16.dense_ops))
    assert acc16.attn_s_per_pair == fp16.attn_s_per_pair  # attention stays at the bf16 peak
    h100 = cost("h100-sxm", weights="fp16"), cost("h100-sxm", weights="fp16", compute="fp16-acc16")
    assert h100[0].dense_ops == h100[1].dense_ops  # data-center parts: no faster


# ---------------------------------------------------------------------------- fitted


def fitted(weights="bf16", compute=None, precision=True) -> FittedCost:
    cal = load_calibration("a100-vidur-linear")
    if precision:
        cal = dataclasses.replace(cal, precision=load_calibration("h100-sxm").precision)
    cm = build_fitted_cost(load_model("llama-3-8b"), cal, "bf16", DTYPE_BYTES[weights], weight_dtype=weights,
                           compute_dtype=compute)
    return cm.without_composition()


def test_fitted_without_the_new_keys_ignores_compute_dtype() -> None:
    base = fitted("int8", precision=False)
    for mode in ("bf16", "fp8", "int8", "fp16-acc16"):
        other = fitted("int8", mode, precision=False)
        assert all(other.step_time_s(s) == base.step_time_s(s) for s in random_shapes(50))


def test_fitted_sixteen_bit_is_unchanged_by_the_new_keys() -> None:
    new, old = fitted("fp16"), fitted("fp16", precision=False)
    assert all(new.step_time_s(s) == old.step_time_s(s) for s in random_shapes(100))


def test_fitted_fp8_without_a_measured_row_scales_the_analytic_flops() -> None:
    bf16, fp8 = fitted("bf16", "bf16"), fitted("fp8")
    m, n, k = 8192, 4096, 4096
    assert fp8._gemm(m, n, k) < 0.6 * bf16._gemm(m, n, k)  # compute-bound: ~half
    assert prefill_time_s(fp8, 8192) < prefill_time_s(bf16, 8192)


def test_fitted_weight_only_dequant_slows_the_memory_bound_gemm() -> None:
    wo, w8a8 = fitted("int8"), fitted("int8", "int8")
    assert wo.gemm_dtype == w8a8.gemm_dtype == "int8"
    assert wo._gemm(1, 4096, 4096) > w8a8._gemm(1, 4096, 4096)


# ---------------------------------------------------------------------------- MoE routing


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite"])
def test_moe_routing_bytes(name: str) -> None:
    model = load_model(name)
    got = moe_routing_bytes_per_token(model, 2)
    k, h = model.num_experts_per_tok, model.hidden_size
    assert got == model.num_moe_layers * ((4 * k * h + model.num_experts) * 2 + 8 * k) > 0
    assert moe_routing_bytes_per_token(load_model("llama-3-8b"), 2) == 0


def test_datasheet_moe_pays_routing_and_dense_does_not() -> None:
    model, cal = load_model("qwen3-30b-a3b"), load_calibration("h100-sxm")
    cm = build_datasheet_cost(model, cal, "bf16", 2, weight_dtype="bf16")
    kv = kv_bytes_per_token(model, "bf16")
    routing = moe_routing_bytes_per_token(model, 2)
    assert cm.elementwise_s_per_token * cal.effective_bandwidth_bytes_per_s == pytest.approx(
        elementwise_bytes_per_token(model, 2, kv) + routing)
    launches = model.num_layers * 6 + model.num_moe_layers * MOE_ROUTING_KERNELS_PER_LAYER
    from sim.cost.datasheet import MOE_LAYER_FIXED_S
    assert cm.fixed_step_s == pytest.approx(cal.step_overhead_s + launches * cal.kernel_launch_s
                                            + model.num_moe_layers * MOE_LAYER_FIXED_S)
    dense = build_datasheet_cost(load_model("llama-3-8b"), cal, "bf16", 2)
    assert dense.fixed_step_s == pytest.approx(cal.step_overhead_s + 32 * 6 * cal.kernel_launch_s)


@pytest.mark.parametrize("which", ["datasheet", "fitted"])
def test_moe_routing_cost_is_positive_and_monotone(which: str) -> None:
    model = load_model("qwen3-30b-a3b")
    if which == "datasheet":
        cm = build_datasheet_cost(model, load_calibration("h100-sxm"), "bf16", 2)
        assert isinstance(cm, DatasheetCost)
        per_token = cm.elementwise_s_per_token
        routing = [m * per_token for m in (1, 8, 64, 512)]  # the token-linear part holds the routing
        assert routing == sorted(routing) and routing[0] > 0
        times = [decode_step_time_s(cm, batch_size=b, context_tokens=256) for b in (1, 8, 64, 512)]
    else:
        cm = build_fitted_cost(model, load_calibration("cpu-epyc-2core"), "bf16", 2).without_composition()
        routing = [cm.step_parts(BatchShape.decode(b, 256))["moe_routing"] for b in (1, 8, 64, 512)]
        assert routing[0] > 0 and routing == sorted(routing)
        times = [decode_step_time_s(cm, batch_size=b, context_tokens=256) for b in (1, 8, 64, 512)]
        assert "moe_routing" not in build_fitted_cost(load_model("llama-3-8b"), load_calibration(
            "cpu-epyc-2core"), "bf16", 2).step_parts(BatchShape.decode(4, 256))
    assert times == sorted(times)


def test_a_scaled_gemm_form_keeps_the_tile_and_wave_term() -> None:
    """A math mode without a measured grid takes the fitted form with scaled peaks: the
    tile/wave term of the fit (sim/calib/gemm_tiles.py) must survive the scaling."""
    import dataclasses

    from sim.calib.calibration import load_calibration
    from sim.calib.kernel_models import analytic_s
    from sim.cost.fitted import build_fitted_cost
    from sim.model.hf_config import load_model

    cal = load_calibration("a100-vidur-linear")
    cost = build_fitted_cost(load_model("llama-3-8b"), cal)
    params = dict(cal.kernels["gemm"].params)
    assert params.get("sm_count") and params.get("tile_m")
    scaled = dataclasses.replace(cost, gemm_params=params, gemm_measured=frozenset())
    for m in (1, 65, 200, 4096):
        assert scaled._gemm(m, 4096, 4096) == analytic_s(params, "gemm", dict(m=m, n=4096, k=4096, dtype=scaled.dtype))
    # 65 rows pad to two 64-row tiles: dearer per row than 64 rows
    assert scaled._gemm(65, 4096, 4096) / 65 > scaled._gemm(64, 4096, 4096) / 64


# ---------------------------------------------------------------------------- the lm_head's dtype


def test_quantized_layers_keep_a_bf16_lm_head_unless_told() -> None:
    # FP8/AWQ/NVFP4 checkpoints keep the vocabulary matrices 16-bit: the lm_head is read at 2 bytes a
    # weight and multiplied at the bf16 peak beside fp8 layers; embedding_dtype fp8 (a GGUF-like file) not
    cal = load_calibration("h100-sxm")
    model = load_model("llama-3.1-8b")
    k, n, bw = model.hidden_size, model.vocab_size, cal.effective_bandwidth_bytes_per_s
    fp8 = build_cost_model(model, cal, "bf16", 1, weight_dtype="fp8")
    both = build_cost_model(model, cal, "bf16", 1, weight_dtype="fp8", embedding_dtype="fp8")
    assert fp8.compute_dtype == both.compute_dtype == "fp8" and fp8.dense_ops == both.dense_ops
    assert fp8.lm_head[0] == pytest.approx(k * n * 2 / bw) and both.lm_head[0] == pytest.approx(k * n / bw)
    assert fp8.lm_head[1] == pytest.approx(2 * k * n / (989e12 * cal.compute_eff_max))
    fp8_peak = 989e12 * cal.precision.speedup("fp8")  # the fp8 peak at its mode efficiency
    assert both.lm_head[1] == pytest.approx(2 * k * n / (fp8_peak * cal.compute_eff_max))
    step = [decode_step_time_s(c, batch_size=1, context_tokens=512) for c in (fp8, both)]
    assert step[0] - step[1] == pytest.approx(k * n / bw, rel=0.05)  # one more byte per lm_head weight
    bf16 = build_cost_model(model, cal, "bf16", 2, weight_dtype="bf16")
    assert build_cost_model(model, cal, "bf16", 2, weight_dtype="bf16", embedding_dtype="bf16") == bf16


def test_fitted_lm_head_runs_the_bf16_gemm_beside_fp8_layers() -> None:
    fp8, bf16 = fitted("fp8"), fitted("bf16", "bf16")
    n, k = fp8.lm_head
    assert bf16.head_gemm is None and fp8.head_gemm is not None
    assert fp8._gemm(4, n, k, fp8.head_gemm) == pytest.approx(bf16._gemm(4, n, k))
    assert fp8._gemm(4, n, k) < 0.75 * bf16._gemm(4, n, k)  # the layers' fp8 GEMM reads half the bytes


def test_a_moe_layer_pays_a_fixed_time_per_step_graphs_or_not() -> None:
    # MOE_LAYER_FIXED_S: routing and the MoE kernels' floors, fitted on published fused-MoE timings
    from sim.cost.datasheet import MOE_LAYER_FIXED_S
    cal = load_calibration("h100-sxm")
    moe, dense = load_model("qwen3-30b-a3b"), load_model("qwen3-8b")
    for launch in (cal.kernel_launch_s, 0.0):  # eager, and a graph replay (no launches)
        c = dataclasses.replace(cal, kernel_launch_s=launch, step_overhead_s=0.0)
        m, d = (build_datasheet_cost(x, c, "bf16", 2) for x in (moe, dense))
        kernels = moe.num_layers * 6 + moe.num_moe_layers * MOE_ROUTING_KERNELS_PER_LAYER  # 5 non-GEMM + attention
        assert m.fixed_step_s == pytest.approx(kernels * launch + moe.num_moe_layers * MOE_LAYER_FIXED_S)
        assert d.fixed_step_s == pytest.approx(dense.num_layers * 6 * launch)
    assert MOE_LAYER_FIXED_S * moe.num_moe_layers == pytest.approx(1.44e-3)  # 48 MoE layers: 1.44 ms a step

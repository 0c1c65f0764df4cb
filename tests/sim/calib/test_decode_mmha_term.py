"""Decode attention's MMHA-fallback term (TensorRT-LLM: XQA for 2 to 32 query heads per KV head,
its masked multi-head attention kernel otherwise): which launches fall back, by hand, off without
its parameters, validated, and in the simulated step for MHA models but not MLA."""

from __future__ import annotations

import math

import pytest

from sim.calib.attention_terms import MMHA_PARAMS, SPLIT_PARAMS, decode_split_s, mmha_on, runs_mmha
from sim.calib.kernel_models import KernelFit, kernel_fit_from_dict
from sim.errors import ConfigError

SPLIT = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 50e12, "x_half": 0.0, "overhead_s": 8e-6, "item_s": 1e-10,
         "sharpness": math.inf, "unit_s": 30e-9, "kv_block": 32.0, "split_len": 500.0, "max_splits": 40.0,
         "full_ctas": 80.0}
MMHA = {**SPLIT, "xqa_max_group": 32.0, "mmha_flops_per_s": 6e12, "mmha_unit_s": 6e-9}


def _shape(n: int, c: int, hq: int, hk: int, d: int = 128) -> dict:
    return dict(num_seqs=n, context_len=c, num_q_heads=hq, num_kv_heads=hk, head_dim=d, block_size=16, dtype="bf16")


def test_mha_and_groups_over_32_run_mmha_the_rest_xqa() -> None:
    assert mmha_on(MMHA) and not mmha_on(SPLIT)
    assert [g for g in (1, 2, 8, 16, 32, 48, 64, 128) if runs_mmha(MMHA, g)] == [1, 48, 64, 128]
    assert not any(runs_mmha(SPLIT, g) for g in (1, 64))
    xqa, mm = KernelFit("decode_attention", MMHA), KernelFit("decode_attention", SPLIT)
    for hq, hk in ((8, 1), (32, 8), (32, 1)):  # XQA: exactly the split-KV form without the term
        assert xqa.analytic_s(**_shape(64, 4096, hq, hk)) == mm.analytic_s(**_shape(64, 4096, hq, hk))


def test_the_fallback_by_hand() -> None:
    # 256 sequences x 64 query heads on one KV head, 2 tokens: 16,384 (sequence, query head) units
    n, c, hq, d = 256, 2, 64, 128
    c_pad = 32.0
    kv, q, flops = n * c_pad * 2 * d * 2, n * 2 * hq * d * 2, 4.0 * n * c_pad * hq * d
    mem, comp = kv / 3e12 + q / 3e12, flops / 6e12  # 16,384 units fill the 80 CTAs: occupancy 1
    want = 8e-6 + 1e-10 * n + 6e-9 * n * hq + max(mem, comp)
    assert KernelFit("decode_attention", MMHA).analytic_s(**_shape(n, c, hq, 1, d)) == pytest.approx(want)
    # the same launch as XQA (the term off): one unit per sequence, tensor-core FLOP rate: far cheaper
    assert KernelFit("decode_attention", SPLIT).analytic_s(**_shape(n, c, hq, 1, d)) < 0.2 * want


def test_mha_counts_its_heads_as_units_for_the_occupancy() -> None:
    # one sequence, 8 heads (MHA), 65,536 tokens: 8 x 40 splits of the 80 CTAs either way; the MMHA path's
    # own unit cost and FLOP rate apply (memory-bound here: the FLOP rate does not show)
    shape = _shape(1, 65536, 8, 8)
    kv = 65536 * 2 * 8 * 128 * 2
    assert KernelFit("decode_attention", MMHA).analytic_s(**shape) == pytest.approx(
        8e-6 + 1e-10 + 6e-9 * 8 + max(kv / 3e12 + 8 * 512 / 3e12, 4.0 * 65536 * 8 * 128 / 6e12))


def test_without_the_query_heads_only_mha_falls_back() -> None:
    # the simulator passes no query heads for MLA (its latent is one KV head): no fallback then
    args = (MMHA, 16, 16 * 4096, 1.0, 2 * 576 * 2, 16 * 2 * 128 * 512 * 2, 4.0 * 128 * 576)
    assert decode_split_s(*args) == decode_split_s(SPLIT, *args[1:])
    assert decode_split_s(*args, q_heads=128.0) > decode_split_s(*args)


def test_the_term_is_validated_and_all_or_nothing() -> None:
    raw = {"params": MMHA}
    assert kernel_fit_from_dict("decode_attention", raw, file="f.yaml").params["mmha_unit_s"] == 6e-9
    with pytest.raises(ConfigError, match="mmha_unit_s: missing"):
        kernel_fit_from_dict("decode_attention", {"params": {k: v for k, v in MMHA.items() if k != "mmha_unit_s"}},
                             file="f.yaml")
    with pytest.raises(ConfigError, match="xqa_max_group"):
        kernel_fit_from_dict("decode_attention", {"params": {**MMHA, "xqa_max_group": 0.0}}, file="f.yaml")
    with pytest.raises(ConfigError, match="not both"):
        kernel_fit_from_dict("decode_attention", {"params": {**MMHA, "mha_full_ctas": 70.0, "mha_overhead_s": 9e-6,
                                                             "swap_s": 6e-6}}, file="f.yaml")
    with pytest.raises(ConfigError, match="needs the split-KV term"):
        kernel_fit_from_dict("decode_attention", {"params": {k: v for k, v in MMHA.items() if k not in SPLIT_PARAMS}},
                             file="f.yaml")
    assert set(MMHA_PARAMS) <= set(kernel_fit_from_dict("decode_attention", raw, file="f.yaml").params)


def test_the_simulated_step_falls_back_for_an_mha_model_only() -> None:
    import dataclasses

    from sim.calib.calibration import load_calibration
    from sim.cost.fitted import build_fitted_cost
    from sim.cost.shape import BatchShape
    from sim.model.hf_config import load_model

    cal = load_calibration("h100-sxm@trtllm")
    on = dataclasses.replace(cal, kernels={**cal.kernels, "decode_attention": KernelFit("decode_attention", MMHA)})
    off = dataclasses.replace(cal, kernels={**cal.kernels, "decode_attention": KernelFit("decode_attention", SPLIT)})
    step = BatchShape(num_seqs=256, num_prefill_tokens=0, num_decode_tokens=256, decode_kv_tokens=256 * 2,
                      prefill_attn_pairs=0, prefill_kv_tokens=0, num_prefill_seqs=0)
    for name, falls_back in (("llama-2-7b", True), ("llama-3-8b", False)):
        model = load_model(name)
        a, b = (build_fitted_cost(model, c).step_parts(step)["decode_attention"] for c in (on, off))
        assert (a != b) is falls_back, name

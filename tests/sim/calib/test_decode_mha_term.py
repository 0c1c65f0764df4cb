"""Decode attention's query-group-swap term (FlashAttention-2 under vLLM's varlen decode): MHA
unsplit with its own CTA count and fixed cost, GQA's swapped query and output copied when the
swap needs a copy; by hand, monotone, validated, and off without its parameters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calib.attention_terms import MHA_PARAMS, cold_l2, decode_split_s, mha_on
from sim.calib.kernel_models import KernelFit, kernel_fit_from_dict
from sim.errors import ConfigError

BASE = {"bandwidth_bytes_per_s": 1.5e12, "flops_per_s": math.inf, "x_half": 0.0, "overhead_s": 11e-6,
        "item_s": 1e-10, "sharpness": math.inf}
SPLIT = {**BASE, "unit_s": 13e-9, "kv_block": 64.0, "split_len": 512.0, "max_splits": 12.0, "full_ctas": 60.0}
SWAP = {**SPLIT, "mha_full_ctas": 70.0, "mha_overhead_s": 9e-6, "swap_s": 6e-6}
SHAPE = dict(num_seqs=1, context_len=131072, num_q_heads=1, num_kv_heads=1, head_dim=128, block_size=16,
             dtype="bf16")


def test_mha_is_unsplit_and_reads_at_its_ctas_share() -> None:
    # one sequence, one head, 131,072 tokens: one CTA of the 70 the MHA kernel needs, no split
    kv, q = 131072 * 2 * 128 * 2, 2 * 128 * 2
    want = 9e-6 + 1e-10 + 13e-9 + kv * 70.0 / 1.5e12 + q / 1.5e12
    assert KernelFit("decode_attention", SWAP).analytic_s(**SHAPE) == pytest.approx(want)
    # the same KV with 8 query heads sharing the KV head: split 12 ways, 12 of 60 CTAs, no copy (hk 1)
    gqa = {**SHAPE, "num_q_heads": 8}
    want = 11e-6 + 1e-10 + 13e-9 + kv * 60.0 / 12.0 / 1.5e12 + 8 * q / 1.5e12
    assert KernelFit("decode_attention", SWAP).analytic_s(**gqa) == pytest.approx(want)
    assert KernelFit("decode_attention", SPLIT).analytic_s(**gqa) == pytest.approx(want)


def test_the_swap_copy_is_paid_only_where_the_swap_needs_a_copy() -> None:
    fit_ = KernelFit("decode_attention", SWAP)
    plain = KernelFit("decode_attention", SPLIT)
    short = {**SHAPE, "context_len": 2, "num_q_heads": 32}
    for n, hk, copied in ((1, 8, False), (2, 1, False), (2, 8, True), (64, 4, True)):
        shape = {**short, "num_seqs": n, "num_kv_heads": hk}
        extra = fit_.analytic_s(**shape) - plain.analytic_s(**shape)
        assert extra == pytest.approx(6e-6 if copied else 0.0, abs=1e-12)
    # MHA: its own fixed cost, and its 32 CTAs a share of 70 instead of 60 (4 x 64 tokens x 8 heads of KV)
    mha_short = {**short, "num_q_heads": 8, "num_kv_heads": 8, "num_seqs": 4}
    kv = 4 * 64 * 2 * 8 * 128 * 2
    want = 9e-6 - 11e-6 + kv / 1.5e12 * (70.0 - 60.0) / 32
    assert fit_.analytic_s(**mha_short) - plain.analytic_s(**mha_short) == pytest.approx(want, abs=1e-12)


def test_off_without_its_parameters() -> None:
    assert mha_on(SWAP) and not mha_on(SPLIT) and not mha_on({**BASE, "mha_full_ctas": 70.0})
    args = (4, 4 * 5000, 8, 2 * 8 * 128 * 2, 4 * 2 * 8 * 128 * 2, 4.0 * 8 * 128)
    assert decode_split_s(SPLIT, *args, mha=True) == decode_split_s(SPLIT, *args, mha=False)
    assert decode_split_s(SWAP, *args, mha=True) != decode_split_s(SPLIT, *args, mha=True)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 4096), c=st.integers(0, 200_000), hk=st.integers(1, 16), g=st.sampled_from([1, 4]),
       field=st.sampled_from(["num_seqs", "context_len", "num_kv_heads"]), extra=st.integers(1, 5000))
def test_monotone_in_batch_context_and_kv_heads(n, c, hk, g, field, extra) -> None:
    fit_ = KernelFit("decode_attention", SWAP)
    shape = {**SHAPE, "num_seqs": n, "context_len": c, "num_kv_heads": hk, "num_q_heads": g * hk}
    more = {**shape, field: shape[field] + extra}
    more["num_q_heads"] = g * more["num_kv_heads"]
    assert fit_.analytic_s(**more) >= fit_.analytic_s(**shape) > 0


def test_round_trips_and_is_validated() -> None:
    again = kernel_fit_from_dict("decode_attention", KernelFit("decode_attention", SWAP).to_dict(), file="x.yaml")
    assert again.params == pytest.approx(SWAP, rel=1e-5)
    with pytest.raises(ConfigError, match=r"params\.swap_s: missing"):
        kernel_fit_from_dict("decode_attention", {"params": {**SPLIT, "mha_full_ctas": 70.0, "mha_overhead_s": 9e-6}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match=r"params\.mha_full_ctas: the unsplit-MHA term needs the split-KV term"):
        kernel_fit_from_dict("decode_attention", {"params": {**BASE, **{k: SWAP[k] for k in MHA_PARAMS}}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match="for decode_attention only"):
        kernel_fit_from_dict("prefill_attention", {"params": {**BASE, **{k: SWAP[k] for k in MHA_PARAMS}}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match=r"params\.mha_full_ctas: expected a number from 1"):
        kernel_fit_from_dict("decode_attention", {"params": {**SWAP, "mha_full_ctas": 0.5}}, file="x.yaml")


def test_the_simulated_step_runs_an_mha_model_unsplit() -> None:
    import dataclasses

    from sim.calib.calibration import load_calibration
    from sim.cost.fitted import build_fitted_cost
    from sim.cost.shape import BatchShape
    from sim.model.hf_config import load_model

    cal = load_calibration("a100-80gb@vllm")
    fit_ = cal.kernels["decode_attention"]
    swapped = dataclasses.replace(fit_, params={**fit_.params, "mha_full_ctas": 500.0, "mha_overhead_s": 9e-6,
                                                "swap_s": 6e-6})
    cal_swap = dataclasses.replace(cal, kernels={**cal.kernels, "decode_attention": swapped})
    model = load_model("llama-2-7b")  # 32 query heads, 32 KV heads
    step = BatchShape(num_seqs=1, num_prefill_tokens=0, num_decode_tokens=1, decode_kv_tokens=65536,
                      prefill_attn_pairs=0, prefill_kv_tokens=0, num_prefill_seqs=0)
    shape = dict(num_seqs=1, context_len=65536, num_q_heads=32, num_kv_heads=32, head_dim=128, block_size=16,
                 dtype="bf16")
    got = build_fitted_cost(model, cal_swap).step_parts(step)["decode_attention"]
    cold = KernelFit("decode_attention", cold_l2(swapped.params))  # the step reads KV without the L2 term
    assert got == pytest.approx(model.num_layers * cold.analytic_s(**shape), rel=1e-9)
    assert got != pytest.approx(build_fitted_cost(model, cal).step_parts(step)["decode_attention"], rel=1e-3)

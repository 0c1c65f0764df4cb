"""Prefill attention's GQA-packing term (sim/calib/attention_terms.py): exact on hand-computed shapes,
monotone, validated, carried into the simulated step, and off (the old predictions) without it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calib.attention_terms import GQA_PARAMS, gqa_on, prefill_gqa
from sim.calib.kernel_models import KernelFit, kernel_fit_from_dict
from sim.errors import ConfigError

BASE = {"bandwidth_bytes_per_s": 2e12, "flops_per_s": 1e15, "x_half": 0.0, "overhead_s": 10e-6,
        "item_s": 8e-9, "sharpness": math.inf}
PREFILL = {**BASE, "head_dim_half": 64.0, "q_block": 128.0, "full_q_ctas": 256.0}
GQA = {**PREFILL, "cta_s": 20e-9, "kv_reuse_len": 16.0, "max_reread": 8.0}
SHAPE = dict(num_seqs=64, query_len=1, context_len=0, num_q_heads=32, num_kv_heads=32, head_dim=128, dtype="bf16")


def test_packed_ctas_and_rereads_by_hand() -> None:
    # 32 query heads on 1 KV head, 16 tokens: 16 x 32 = 512 packed rows = 4 tiles per sequence
    extra, cta = prefill_gqa(GQA, 2, 16, 32, 1, kv_bytes=1000.0)
    r = 128 / 16.0  # max(q, q_block) / kv_reuse_len
    assert extra == pytest.approx(1000.0 * r / (1 + r / 8.0))
    assert cta == pytest.approx(20e-9 * 2 * 1 * 4)
    # without GQA (32 KV heads) the same tokens are 32 one-tile CTAs per sequence: 8x the CTAs
    assert prefill_gqa(GQA, 2, 16, 32, 32, kv_bytes=1000.0)[1] == pytest.approx(8 * cta)
    assert prefill_gqa(PREFILL, 2, 16, 32, 1, kv_bytes=1000.0) == (0.0, 0.0)


def test_one_token_prefills_follow_the_ctas_not_the_flops() -> None:
    """At one query token per sequence the time is the CTAs': 32x as many without GQA as with one KV head."""
    fit_ = KernelFit("prefill_attention", {**GQA, "overhead_s": 0.0, "item_s": 0.0, "bandwidth_bytes_per_s": 1e30})
    mha, mqa = fit_.analytic_s(**SHAPE), fit_.analytic_s(**{**SHAPE, "num_kv_heads": 1})
    flops_s = lambda ctas: 4.0 * 32 * 128 * 64 * 1 / (1e15 * 128 / 192 * min(1.0, ctas / 256))  # noqa: E731
    assert mha == pytest.approx(20e-9 * 64 * 32 + flops_s(64 * 32))
    assert mqa == pytest.approx(20e-9 * 64 + flops_s(64))


def test_the_kv_reread_makes_mha_slower_than_gqa_on_the_memory_side() -> None:
    fit_ = KernelFit("prefill_attention", {**GQA, "flops_per_s": 1e30, "cta_s": 0.0})
    shape = {**SHAPE, "query_len": 4096, "num_seqs": 4}
    plain = KernelFit("prefill_attention", PREFILL)
    assert fit_.analytic_s(**shape) > plain.analytic_s(**shape)
    reread = (4096 / 16) / (1 + 4096 / 16 / 8)  # 7.76: near max_reread
    for hk in (32, 4):  # the KV (per KV head) read 1 + reread times, Q and O (per query head) once
        nbytes = 4 * 4096 * 128 * 2 * (2 * 32 + 2 * hk * (1 + reread))
        want = 10e-6 + 8e-9 * 4 + nbytes / 2e12
        assert fit_.analytic_s(**{**shape, "num_kv_heads": hk}) == pytest.approx(want)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 256), q=st.integers(1, 20_000), hq=st.sampled_from([8, 16, 32, 64]),
       hk=st.sampled_from([1, 2, 4, 8]), d=st.sampled_from([64, 128, 256]),
       field=st.sampled_from(["num_seqs", "query_len", "context_len"]), extra=st.integers(1, 3000))
def test_monotone_in_tokens_and_sequences(n, q, hq, hk, d, field, extra) -> None:
    fit_ = KernelFit("prefill_attention", GQA)
    shape = {**SHAPE, "num_seqs": n, "query_len": q, "num_q_heads": hq, "num_kv_heads": hk, "head_dim": d}
    assert fit_.analytic_s(**{**shape, field: shape[field] + extra}) >= fit_.analytic_s(**shape) > 0


def test_round_trip_and_validation() -> None:
    fit_ = kernel_fit_from_dict("prefill_attention", KernelFit("prefill_attention", GQA).to_dict(), file="x.yaml")
    assert gqa_on(fit_.params) and fit_.params == pytest.approx(GQA, rel=1e-5)
    with pytest.raises(ConfigError, match=r"params\.max_reread"):
        kernel_fit_from_dict("prefill_attention", {"params": {**PREFILL, "cta_s": 1e-8, "kv_reuse_len": 16.0}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match="needs the prefill term"):
        kernel_fit_from_dict("prefill_attention", {"params": {**BASE, **{k: GQA[k] for k in GQA_PARAMS}}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match="for prefill_attention only"):
        kernel_fit_from_dict("decode_attention", {"params": {**BASE, **{k: GQA[k] for k in GQA_PARAMS}}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match=r"params\.cta_s"):
        kernel_fit_from_dict("prefill_attention", {"params": {**GQA, "cta_s": -1.0}}, file="x.yaml")


def test_the_simulated_step_carries_the_term() -> None:
    """One chunk in the fitted step costs what the shape form says, with the packed CTAs and re-reads."""
    import dataclasses

    from sim.calib.calibration import load_calibration
    from sim.cost.fitted import build_fitted_cost
    from sim.cost.shape import BatchShape
    from sim.model.hf_config import load_model

    cal = load_calibration("h100-sxm@vllm")
    fit_ = dataclasses.replace(cal.kernels["prefill_attention"], params={**GQA, "x_half": 0.0, "sharpness": 1.5})
    cal = dataclasses.replace(cal, kernels={**cal.kernels, "prefill_attention": fit_})
    model = load_model("llama-3-8b")  # 32 query heads on 8 KV heads
    q = 300
    shape = BatchShape(num_seqs=2, num_prefill_tokens=2 * q, num_decode_tokens=0, decode_kv_tokens=0,
                       prefill_attn_pairs=2 * q * (q + 1) // 2, prefill_kv_tokens=2 * q, num_prefill_seqs=2)
    want = model.num_layers * fit_.analytic_s(num_seqs=2, query_len=q, context_len=0, num_q_heads=32,
                                              num_kv_heads=8, head_dim=128, dtype="bf16")
    assert build_fitted_cost(model, cal).step_parts(shape)["prefill_attention"] == pytest.approx(want, rel=1e-9)

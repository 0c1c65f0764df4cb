"""Decode attention's split-KV occupancy term: exact on hand-computed shapes, monotone, validated,
and off (the old predictions, bit for bit) in calibrations without its parameters."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calib.attention_terms import SPLIT_PARAMS, decode_split_s
from sim.calib.calibration import calibration_from_dict, load_calibration
from sim.calib.kernel_models import KernelFit, features, kernel_fit_from_dict, roofline_s
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
BASE = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 1e15, "x_half": 0.0, "overhead_s": 10e-6,
        "item_s": 8e-9, "sharpness": 2.0}
SPLIT = {**BASE, "unit_s": 14e-9, "kv_block": 64.0, "split_len": 256.0, "max_splits": 32.0, "full_ctas": 128.0}
SHAPE = dict(num_seqs=1, context_len=65536, num_q_heads=32, num_kv_heads=1, head_dim=128, block_size=16,
             dtype="bf16")


def test_one_sequence_one_kv_head_reads_at_the_occupancy_share_of_bandwidth() -> None:
    p = {**SPLIT, "flops_per_s": math.inf, "sharpness": math.inf}
    # 65,536 tokens: 256 splits wanted, 32 allowed: 32 CTAs of the 128 that fill the memory system
    kv = 65536 * 2 * 1 * 128 * 2
    q = 2 * 32 * 128 * 2
    want = 10e-6 + 8e-9 + 14e-9 + kv / (3e12 * 32 / 128) + q / 3e12
    assert KernelFit("decode_attention", p).analytic_s(**SHAPE) == pytest.approx(want)
    # 64 sequences x 8 KV heads: 512 units fill it; a 100-token context is paid as two 64-token tiles
    shape = {**SHAPE, "num_seqs": 64, "num_kv_heads": 8, "context_len": 100}
    kv = 64 * 128 * 2 * 8 * 128 * 2
    q = 64 * 2 * 32 * 128 * 2
    want = 10e-6 + 64 * 8e-9 + 64 * 8 * 14e-9 + (kv + q) / 3e12
    assert KernelFit("decode_attention", p).analytic_s(**shape) == pytest.approx(want)


def test_without_the_parameters_the_prediction_is_the_old_roofline_bit_for_bit() -> None:
    fit_ = kernel_fit_from_dict("decode_attention", {"params": dict(BASE)}, file="x.yaml")
    assert "full_ctas" not in fit_.params
    for c in (1, 17, 4096):
        shape = {**SHAPE, "context_len": c, "num_seqs": 8}
        assert fit_.analytic_s(**shape) == roofline_s(BASE, *features("decode_attention", shape))


def test_an_older_imported_calibration_loads_and_predicts_as_before() -> None:
    # the file as shipped before the term (git history): no split parameters, same numbers
    try:
        text = subprocess.run(["git", "show", "6be3e1a:calibrations/h100-sxm@vllm.yaml"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git history not available (an exported tree)")
    raw = yaml.safe_load(text)
    cal = calibration_from_dict(raw, file="old.yaml")
    params = raw["kernels"]["decode_attention"]["params"]
    assert not set(SPLIT_PARAMS) & set(params)
    shape = {**SHAPE, "num_seqs": 32, "context_len": 2048, "num_kv_heads": 8}
    old = {k: float(".inf" != v and v or math.inf) if isinstance(v, str) else float(v) for k, v in params.items()}
    assert cal.kernels["decode_attention"].analytic_s(**shape) == roofline_s(old, *features("decode_attention", shape))


def test_the_shipped_imported_calibrations_carry_the_term_and_round_trip() -> None:
    cal = load_calibration("h100-sxm@vllm")
    fit_ = cal.kernels["decode_attention"]
    assert fit_.params["full_ctas"] > 0 and fit_.params["kv_block"] in (32.0, 64.0, 128.0)
    again = kernel_fit_from_dict("decode_attention", fit_.to_dict(), file="x.yaml")
    assert again.analytic_s(**SHAPE) == pytest.approx(fit_.analytic_s(**SHAPE), rel=1e-5)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 4096), c=st.integers(0, 200_000), hk=st.integers(1, 16), d=st.sampled_from([64, 128, 256]),
       field=st.sampled_from(["num_seqs", "context_len", "num_kv_heads", "num_q_heads"]), extra=st.integers(1, 5000))
def test_monotone_in_every_field(n, c, hk, d, field, extra) -> None:
    fit_ = KernelFit("decode_attention", SPLIT)
    shape = {**SHAPE, "num_seqs": n, "context_len": c, "num_kv_heads": hk, "num_q_heads": 4 * hk, "head_dim": d}
    bigger = {**shape, field: shape[field] + extra}
    assert fit_.analytic_s(**bigger) >= fit_.analytic_s(**shape) > 0


def test_aggregate_form_matches_the_shape_form() -> None:
    # the simulator's call (batch totals) and the per-shape one agree on a uniform batch
    shape = {**SHAPE, "num_seqs": 16, "context_len": 3000, "num_kv_heads": 4}
    agg = decode_split_s(SPLIT, 16, 16 * 3000, 4, 2 * 4 * 128 * 2, 16 * 2 * 32 * 128 * 2, 4.0 * 32 * 128)
    assert agg == KernelFit("decode_attention", SPLIT).analytic_s(**shape)


@pytest.mark.parametrize(("change", "key"), [
    ({"full_ctas": None}, "full_ctas"), ({"kv_block": 0.0}, "kv_block"), ({"split_len": "x"}, "split_len"),
    ({"max_splits": math.nan}, "max_splits")])
def test_bad_parameters_name_the_key(change, key) -> None:
    params = {k: v for k, v in {**SPLIT, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=rf"kernels\.decode_attention\.params\.{key}"):
        kernel_fit_from_dict("decode_attention", {"params": params}, file="x.yaml")


def test_the_term_on_another_kernel_is_refused() -> None:
    with pytest.raises(ConfigError, match="for decode_attention only"):
        kernel_fit_from_dict("prefill_attention", {"params": SPLIT}, file="x.yaml")


PREFILL = {**BASE, "head_dim_half": 64.0, "q_block": 128.0, "full_q_ctas": 256.0}
PSHAPE = dict(num_seqs=1, query_len=1024, context_len=0, num_q_heads=16, num_kv_heads=4, head_dim=128, dtype="bf16")


def test_prefill_efficiency_by_hand() -> None:
    p = {**PREFILL, "bandwidth_bytes_per_s": 1e30, "overhead_s": 0.0, "item_s": 0.0, "sharpness": math.inf}
    # 1 x 16 heads x 8 query tiles = 128 CTAs of 256: half the rate; head dim 128: 128 / 192 of it
    flops = 4.0 * 16 * 128 * 1024 * 1025 / 2
    want = flops / (1e15 * 128 / 192 * 0.5)
    assert KernelFit("prefill_attention", p).analytic_s(**PSHAPE) == pytest.approx(want)
    full = {**PSHAPE, "num_seqs": 4}  # 512 CTAs: the full rate
    assert KernelFit("prefill_attention", p).analytic_s(**full) == pytest.approx(4 * flops / (1e15 * 128 / 192))


def test_prefill_without_the_parameters_is_the_old_roofline() -> None:
    fit_ = kernel_fit_from_dict("prefill_attention", {"params": dict(BASE)}, file="x.yaml")
    assert fit_.analytic_s(**PSHAPE) == roofline_s(BASE, *features("prefill_attention", PSHAPE))
    assert kernel_fit_from_dict("prefill_attention", KernelFit("prefill_attention", PREFILL).to_dict(),
                                file="x.yaml").params == pytest.approx(PREFILL, rel=1e-5)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 256), q=st.integers(1, 20_000), hq=st.integers(1, 96), d=st.sampled_from([64, 128, 192, 256]),
       field=st.sampled_from(["num_seqs", "query_len", "num_q_heads", "head_dim"]), extra=st.integers(1, 3000))
def test_prefill_monotone_in_every_field(n, q, hq, d, field, extra) -> None:
    fit_ = KernelFit("prefill_attention", PREFILL)
    shape = {**PSHAPE, "num_seqs": n, "query_len": q, "num_q_heads": hq, "head_dim": d}
    assert fit_.analytic_s(**{**shape, field: shape[field] + extra}) >= fit_.analytic_s(**shape) > 0


def test_prefill_term_partial_or_on_decode_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"params\.q_block"):
        kernel_fit_from_dict("prefill_attention", {"params": {**BASE, "head_dim_half": 64.0, "full_q_ctas": 9.0}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match="for prefill_attention only"):
        kernel_fit_from_dict("decode_attention", {"params": PREFILL}, file="x.yaml")


L2 = {**SPLIT, "l2_bytes": 64e6, "l2_bandwidth_bytes_per_s": 9e12, "l2_sharpness": 8.0}


def test_l2_residency_by_hand_and_off_without_its_parameters() -> None:
    from sim.calib.attention_terms import cold_l2, l2_on

    p = {**L2, "flops_per_s": math.inf, "sharpness": math.inf}
    # 256 sequences x 8 KV heads x 1,024 tokens: 2,048 units fill it; 1 GiB of KV, 16 x the L2
    shape = {**SHAPE, "num_seqs": 256, "num_kv_heads": 8, "context_len": 1024}
    kv, q = 256 * 1024 * 2 * 8 * 128 * 2, 256 * 2 * 32 * 128 * 2
    hit = 1.0 / (1.0 + (kv / 64e6) ** 8.0)
    want = 10e-6 + 256 * 8e-9 + 256 * 8 * 14e-9 + kv * (hit / 9e12 + (1 - hit) / 3e12) + q / 3e12
    assert KernelFit("decode_attention", p).analytic_s(**shape) == pytest.approx(want)
    small = {**shape, "context_len": 64}  # 64 MiB: 41% of it from the L2, at three times the DRAM's rate
    kv_small = kv / 16
    hit = 1.0 / (1.0 + (kv_small / 64e6) ** 8.0)
    saved = KernelFit("decode_attention", cold_l2(p)).analytic_s(**small) - KernelFit("decode_attention", p).analytic_s(
        **small)
    assert hit == pytest.approx(0.408, abs=0.01) and saved == pytest.approx(kv_small * hit * (1 / 3e12 - 1 / 9e12))
    assert l2_on(L2) and not l2_on(cold_l2(L2)) and not l2_on({**BASE, "l2_bytes": 1e6})
    assert KernelFit("decode_attention", cold_l2(L2)).analytic_s(**small) == KernelFit(
        "decode_attention", SPLIT).analytic_s(**small)
    # an L2 slower than the DRAM reads at the DRAM's bandwidth, not below
    slow = {**p, "l2_bandwidth_bytes_per_s": 1e9}
    assert KernelFit("decode_attention", slow).analytic_s(**small) == pytest.approx(
        KernelFit("decode_attention", cold_l2(p)).analytic_s(**small))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 4096), c=st.integers(0, 200_000), hk=st.integers(1, 16), d=st.sampled_from([64, 128, 256]),
       field=st.sampled_from(["num_seqs", "context_len", "num_kv_heads", "num_q_heads"]), extra=st.integers(1, 5000))
def test_l2_term_monotone_in_every_field(n, c, hk, d, field, extra) -> None:
    fit_ = KernelFit("decode_attention", L2)
    shape = {**SHAPE, "num_seqs": n, "context_len": c, "num_kv_heads": hk, "num_q_heads": 4 * hk, "head_dim": d}
    assert fit_.analytic_s(**{**shape, field: shape[field] + extra}) >= fit_.analytic_s(**shape) > 0


def test_l2_term_round_trips_and_is_validated() -> None:
    again = kernel_fit_from_dict("decode_attention", KernelFit("decode_attention", L2).to_dict(), file="x.yaml")
    assert again.params == pytest.approx(L2, rel=1e-5)
    with pytest.raises(ConfigError, match=r"params\.l2_sharpness"):
        kernel_fit_from_dict("decode_attention", {"params": {**SPLIT, "l2_bytes": 1e6, "l2_bandwidth_bytes_per_s": 1e12}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match=r"params\.l2_bytes: the L2-residency term needs the split-KV term"):
        kernel_fit_from_dict("decode_attention", {"params": {**BASE, **{k: L2[k] for k in (
            "l2_bytes", "l2_bandwidth_bytes_per_s", "l2_sharpness")}}}, file="x.yaml")
    with pytest.raises(ConfigError, match="for decode_attention only"):
        kernel_fit_from_dict("prefill_attention", {"params": {**BASE, "l2_bytes": 1e6, "l2_bandwidth_bytes_per_s": 1e12,
                                                              "l2_sharpness": 4.0}}, file="x.yaml")


def test_without_the_l2_term_the_split_form_is_the_old_expression_bit_for_bit() -> None:
    # the split-KV form as written before the L2 term (shipped files' predictions must not move)
    def old(p, n, kv_tokens, hk, kvb, qb, fl):
        c_pad = math.ceil(kv_tokens / n / p["kv_block"] - 1e-9) * p["kv_block"]
        occ = min(1.0, n * hk * min(max(1.0, c_pad / p["split_len"]), p["max_splits"]) / p["full_ctas"])
        bw = p["bandwidth_bytes_per_s"]
        mem, comp = n * c_pad * kvb / (bw * occ) + qb / bw, n * c_pad * fl / p["flops_per_s"]
        hi, lo = max(mem, comp), min(mem, comp)
        return p["overhead_s"] + p["item_s"] * n + p["unit_s"] * n * hk + hi * (1.0 + (lo / hi) ** p["sharpness"]) ** (
            1.0 / p["sharpness"])

    for n, c, hk in ((1, 65536, 1), (3, 1000, 8), (77, 12345, 2), (1024, 17, 4)):
        args = (n, n * c, hk, 2 * hk * 128 * 2, n * 2 * 4 * hk * 128 * 2, 4.0 * 4 * hk * 128)
        assert decode_split_s(SPLIT, *args) == old(SPLIT, *args)

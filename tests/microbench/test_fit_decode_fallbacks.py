"""Decode attention's per-file terms in the fit (microbench.attention_fit): TensorRT-LLM's MMHA
fallback recovered from synthetic data and fitted on its tables only; the L2-residency term kept
where it lowers the fit's loss (the GEMM's rule) and left out where the data have no L2 step."""

from __future__ import annotations

import itertools

import pytest

from microbench.attention_fit import fit_decode_split
from microbench.fit import BOUNDS, F_SCALE, mape
from sim.calib.kernel_models import KernelFit

SPLIT = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 50e12, "x_half": 0.0, "overhead_s": 8e-6, "item_s": 1e-9,
         "sharpness": 3.0, "unit_s": 30e-9, "kv_block": 32.0, "split_len": 500.0, "max_splits": 40.0,
         "full_ctas": 80.0}


def _records(params: dict, heads, seqs=(1, 4, 32, 256, 1024), contexts=(2, 100, 1024, 8192, 65536),
             impl: str = "torch_flow") -> list[dict]:
    truth = KernelFit("decode_attention", params)
    out = []
    for n, c, (hq, hk), d in itertools.product(seqs, contexts, heads, (64, 128)):
        shape = dict(num_seqs=n, context_len=c, num_q_heads=hq, num_kv_heads=hk, head_dim=d, block_size=16,
                     dtype="bf16")
        out.append({"kernel": "decode_attention", "impl": impl, **shape, "time_s": truth.analytic_s(**shape)})
    return out


def test_the_fit_recovers_the_mmha_fallback() -> None:
    """MMHA at 6 TFLOP/s and 6 ns a (sequence, query head) against XQA's 50 TFLOP/s and 30 ns."""
    truth = {**SPLIT, "xqa_max_group": 32.0, "mmha_flops_per_s": 6e12, "mmha_unit_s": 6e-9}
    recs = _records(truth, heads=((8, 8), (32, 32), (8, 1), (32, 8), (64, 1), (128, 2)))
    params, _ = fit_decode_split(recs, BOUNDS, F_SCALE, l2=False)  # by default: the records are TRT-LLM's
    assert mape(params, "decode_attention", recs) < 0.01
    assert params["xqa_max_group"] == 32.0
    assert params["mmha_flops_per_s"] == pytest.approx(6e12, rel=0.1)
    assert params["mmha_unit_s"] == pytest.approx(6e-9, rel=0.15)
    assert params["unit_s"] == pytest.approx(30e-9, rel=0.15)
    # without it one kernel must serve both: several times worse on the same records
    plain, _ = fit_decode_split(recs, BOUNDS, F_SCALE, l2=False, mmha=False)
    assert "mmha_flops_per_s" not in plain
    assert mape(plain, "decode_attention", recs) > 3 * mape(params, "decode_attention", recs)
    # another engine's tables (FlashAttention-3 here) never get it by default
    fa3 = [{**r, "impl": "vllm_flash_attn_fa3"} for r in recs]
    assert "mmha_flops_per_s" not in fit_decode_split(fa3, BOUNDS, F_SCALE, l2=False)[0]


def test_on_tables_without_a_fallback_the_term_is_kept_only_if_it_lowers_the_loss() -> None:
    recs = _records(SPLIT, heads=((8, 1), (32, 8), (16, 2)))  # XQA's group sizes only
    params, cost = fit_decode_split(recs, BOUNDS, F_SCALE, l2=False)
    plain, plain_cost = fit_decode_split(recs, BOUNDS, F_SCALE, l2=False, mmha=False)
    assert cost <= plain_cost
    assert mape(params, "decode_attention", recs) < 0.01


def test_the_l2_term_is_kept_where_the_data_have_an_l2_and_dropped_where_not() -> None:
    l2 = {**SPLIT, "l2_bytes": 40e6, "l2_bandwidth_bytes_per_s": 9e12, "l2_sharpness": 6.0}
    heads = ((8, 1), (32, 8))
    warm = _records(l2, heads, impl="flashinfer")
    params, _ = fit_decode_split(warm, BOUNDS, F_SCALE)  # the default: fitted, kept if the loss falls
    assert params["l2_bytes"] == pytest.approx(40e6, rel=0.2)
    assert params["l2_bandwidth_bytes_per_s"] > 2 * params["bandwidth_bytes_per_s"]
    assert mape(params, "decode_attention", warm) < 0.5 * mape(
        fit_decode_split(warm, BOUNDS, F_SCALE, l2=False)[0], "decode_attention", warm)
    cold = _records(SPLIT, heads, impl="flashinfer")
    params, _ = fit_decode_split(cold, BOUNDS, F_SCALE)
    # no L2 step in the data: the term lowers nothing and is left out
    assert "l2_bytes" not in params and mape(params, "decode_attention", cold) < 0.01

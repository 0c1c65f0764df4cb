"""The attention terms' fits (microbench.attention_fit): recover synthetic parameters, pick the KV
tile, are used only with a GPU's SM count, and feed the simulator's step (sim/cost/fitted.py)."""

from __future__ import annotations

import itertools

import pytest

from microbench.fit import fit, fit_params, mape
from microbench.gemm_tiles import GemmTiles
from sim.calib.attention_terms import prefill_on, split_on
from sim.calib.calibration import load_calibration
from sim.calib.kernel_models import KernelFit

DECODE = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 1e15, "x_half": 0.0, "overhead_s": 10e-6, "item_s": 8e-9,
          "sharpness": 2.0, "unit_s": 14e-9, "kv_block": 64.0, "split_len": 256.0, "max_splits": 32.0,
          "full_ctas": 128.0}
PREFILL = {"bandwidth_bytes_per_s": 1.5e12, "flops_per_s": 1e15, "x_half": 20.0, "overhead_s": 12e-6,
           "item_s": 30e-9, "sharpness": 2.0, "head_dim_half": 80.0, "q_block": 128.0, "full_q_ctas": 220.0,
           "cta_s": 20e-9, "kv_reuse_len": 12.0, "max_reread": 6.0}
TILES = GemmTiles(132)


def _decode_records(params: dict = DECODE, seqs=(1, 4, 32, 256), contexts=(16, 100, 1024, 8192, 65536),
                    heads=((8, 1), (32, 8))) -> list[dict]:
    """Decode records timed by the form itself with ``params``, over the grid of shapes given."""
    truth = KernelFit("decode_attention", params)
    out = []
    for n, c, (hq, hk), d in itertools.product(seqs, contexts, heads, (64, 128)):
        shape = dict(num_seqs=n, context_len=c, num_q_heads=hq, num_kv_heads=hk, head_dim=d, block_size=16,
                     dtype="bf16")
        out.append({"kernel": "decode_attention", **shape, "time_s": truth.analytic_s(**shape)})
    return out


def _prefill_records() -> list[dict]:
    truth = KernelFit("prefill_attention", PREFILL)
    out = []
    for n, q, (hq, hk), d in itertools.product((1, 8, 64), (1, 16, 256, 2048, 8192), ((8, 1), (32, 8), (16, 16)),
                                               (64, 128, 256)):
        shape = dict(num_seqs=n, query_len=q, context_len=0, num_q_heads=hq, num_kv_heads=hk, head_dim=d,
                     dtype="bf16")
        out.append({"kernel": "prefill_attention", **shape, "time_s": truth.analytic_s(**shape)})
    return out


def test_decode_fit_recovers_the_split_form_and_its_kv_tile() -> None:
    recs = _decode_records()
    params = fit_params("decode_attention", recs, TILES)
    assert params["kv_block"] == 64.0
    assert mape(params, "decode_attention", recs) < 0.01
    assert params["full_ctas"] == pytest.approx(128.0, rel=0.1)


def test_prefill_fit_recovers_the_head_dim_and_gqa_terms() -> None:
    recs = _prefill_records()
    params = fit_params("prefill_attention", recs, TILES)
    assert mape(params, "prefill_attention", recs) < 0.01
    assert params["head_dim_half"] == pytest.approx(80.0, rel=0.1)
    assert params["cta_s"] == pytest.approx(20e-9, rel=0.1)
    assert params["max_reread"] == pytest.approx(6.0, rel=0.15)


def test_without_an_sm_count_the_attention_fits_keep_the_plain_form() -> None:
    for kernel, recs in (("decode_attention", _decode_records()), ("prefill_attention", _prefill_records())):
        params = fit_params(kernel, recs, None)
        assert not split_on(params) and not prefill_on(params)
        # the plain form cannot follow the occupancy: worse than the term on the same data
        assert mape(params, kernel, recs) > 2 * mape(fit_params(kernel, recs, TILES), kernel, recs)


def test_a_gpu_calibration_carries_both_terms_into_the_simulated_step() -> None:
    """The fitted cost's decode attention is the shape form on a uniform batch, and grows with KV."""
    from sim.cost.fitted import build_fitted_cost
    from sim.cost.shape import BatchShape
    from sim.model.hf_config import load_model

    base = load_calibration("h100-sxm")
    recs = _decode_records() + _prefill_records()
    cal = fit(recs, device={"name": "t", "memory_bytes": base.memory_bytes, "provenance": {"sm_count": "132"}},
              base=base, folds=2, grid=False, gemm_tiles=TILES)
    assert split_on(cal.kernel_params("decode_attention")) and prefill_on(cal.kernel_params("prefill_attention"))
    model = load_model("llama-3-8b")
    cm = build_fitted_cost(model, cal)  # the fitted step (a calibration with a fitted GEMM gets it)
    one = BatchShape(num_seqs=1, num_prefill_tokens=0, num_decode_tokens=1, decode_kv_tokens=65536,
                     prefill_attn_pairs=0, prefill_kv_tokens=0, num_prefill_seqs=0)
    parts = cm.step_parts(one)
    # one sequence, 8 KV heads, 65,536 tokens: 8 x 32 splits = 256 CTAs: full bandwidth, as the shape form says
    want = model.num_layers * cal.predict("decode_attention", num_seqs=1, context_len=65536, num_q_heads=32,
                                          num_kv_heads=8, head_dim=128, block_size=16, dtype="bf16")
    assert parts["decode_attention"] == pytest.approx(want, rel=1e-9)
    longer = one._replace(decode_kv_tokens=70000)
    assert cm.step_parts(longer)["decode_attention"] > parts["decode_attention"]


def test_the_simulated_prefill_carries_the_head_dim_term() -> None:
    """One chunk in the fitted step costs what the shape form says (x_half 0: the step's attention
    runs at saturated tiles), and less without the term's efficiency."""
    import dataclasses

    from sim.cost.fitted import build_fitted_cost
    from sim.cost.shape import BatchShape
    from sim.model.hf_config import load_model

    cal = load_calibration("h100-sxm@vllm")
    fit_ = cal.kernels["prefill_attention"]
    assert prefill_on(fit_.params)
    fit_ = dataclasses.replace(fit_, params={**fit_.params, "x_half": 0.0})
    cal = dataclasses.replace(cal, kernels={**cal.kernels, "prefill_attention": fit_})
    model = load_model("llama-3-8b")
    cm = build_fitted_cost(model, cal)
    q = 2048
    shape = BatchShape(num_seqs=1, num_prefill_tokens=q, num_decode_tokens=0, decode_kv_tokens=0,
                       prefill_attn_pairs=q * (q + 1) // 2, prefill_kv_tokens=q, num_prefill_seqs=1)
    want = model.num_layers * fit_.analytic_s(num_seqs=1, query_len=q, context_len=0, num_q_heads=32,
                                              num_kv_heads=8, head_dim=128, dtype="bf16")
    assert cm.step_parts(shape)["prefill_attention"] == pytest.approx(want, rel=1e-9)
    plain = {k: v for k, v in fit_.params.items() if k not in ("head_dim_half", "q_block", "full_q_ctas")}
    cm_plain = build_fitted_cost(model, dataclasses.replace(
        cal, kernels={**cal.kernels, "prefill_attention": dataclasses.replace(fit_, params=plain)}))
    assert cm_plain.step_parts(shape)["prefill_attention"] < cm.step_parts(shape)["prefill_attention"]


def test_decode_fit_recovers_the_l2_residency_term() -> None:
    """KV that fits a 40 MB L2 read at 9 TB/s, the rest at 3 TB/s: the fit finds the L2's size and rate."""
    from microbench.attention_fit import fit_decode_split
    from microbench.fit import BOUNDS, F_SCALE

    recs = _decode_records({**DECODE, "l2_bytes": 40e6, "l2_bandwidth_bytes_per_s": 9e12, "l2_sharpness": 6.0},
                           contexts=(16, 100, 400, 1024, 2048, 8192, 65536))
    params, _ = fit_decode_split(recs, BOUNDS, F_SCALE, l2=True)
    assert mape(params, "decode_attention", recs) < 0.01
    assert params["l2_bytes"] == pytest.approx(40e6, rel=0.15)
    assert params["l2_bandwidth_bytes_per_s"] == pytest.approx(9e12, rel=0.15)
    assert params["bandwidth_bytes_per_s"] == pytest.approx(3e12, rel=0.1)
    # the form without it cannot follow the L2: several times worse on the same records
    plain, _ = fit_decode_split(recs, BOUNDS, F_SCALE, l2=False)
    assert "l2_bytes" not in plain and mape(plain, "decode_attention", recs) > 3 * mape(params, "decode_attention", recs)


def test_the_simulated_step_reads_the_kv_without_the_l2_term() -> None:
    """The tables' warm L2 stays out of a model's step: each layer's KV there is read at DRAM speed."""
    import dataclasses

    from sim.calib.attention_terms import cold_l2
    from sim.cost.fitted import build_fitted_cost
    from sim.cost.shape import BatchShape
    from sim.model.hf_config import load_model

    cal = load_calibration("h100-sxm@vllm")
    fit_ = cal.kernels["decode_attention"]
    warm = dataclasses.replace(fit_, params={**fit_.params, "l2_bytes": 1e9, "l2_bandwidth_bytes_per_s": 1e14,
                                             "l2_sharpness": 4.0})
    cal = dataclasses.replace(cal, kernels={**cal.kernels, "decode_attention": warm})
    model = load_model("llama-3-8b")
    shape = dict(num_seqs=8, context_len=4096, num_q_heads=32, num_kv_heads=8, head_dim=128, block_size=16,
                 dtype="bf16")
    step = BatchShape(num_seqs=8, num_prefill_tokens=0, num_decode_tokens=8, decode_kv_tokens=8 * 4096,
                      prefill_attn_pairs=0, prefill_kv_tokens=0, num_prefill_seqs=0)
    cold = KernelFit("decode_attention", cold_l2(warm.params)).analytic_s(**shape)
    assert warm.analytic_s(**shape) < 0.7 * cold  # 8 x 4,096 tokens x 8 KV heads: 134 MB, in a 1 GB L2
    assert build_fitted_cost(model, cal).step_parts(step)["decode_attention"] == pytest.approx(
        model.num_layers * cold, rel=1e-9)


def test_decode_fit_recovers_the_query_group_swap_term() -> None:
    """MHA unsplit at 70 CTAs with a 9 us fixed cost, GQA's copies 6 us: the fit finds all three."""
    from microbench.attention_fit import fit_decode_split
    from microbench.fit import BOUNDS, F_SCALE

    recs = _decode_records({**DECODE, "full_ctas": 60.0, "mha_full_ctas": 70.0, "mha_overhead_s": 9e-6,
                            "swap_s": 6e-6}, seqs=(1, 2, 4, 32, 256), contexts=(2, 100, 1024, 8192, 65536),
                           heads=((1, 1), (8, 8), (8, 1), (32, 8)))
    params, _ = fit_decode_split(recs, BOUNDS, F_SCALE, mha=True)
    assert mape(params, "decode_attention", recs) < 0.01
    assert params["mha_full_ctas"] == pytest.approx(70.0, rel=0.1)
    assert params["mha_overhead_s"] == pytest.approx(9e-6, rel=0.1)
    assert params["swap_s"] == pytest.approx(6e-6, rel=0.15)
    # without it one split kernel must serve both: several times worse on the same records
    plain, _ = fit_decode_split(recs, BOUNDS, F_SCALE, mha=False)
    assert "mha_full_ctas" not in plain
    assert mape(plain, "decode_attention", recs) > 3 * mape(params, "decode_attention", recs)
    # by default on the tables of FlashAttention-2's varlen decode only (the records' kernel)
    fa2 = [{**r, "impl": "vllm_flash_attn_fa2"} for r in recs]
    assert "mha_full_ctas" in fit_decode_split(fa2, BOUNDS, F_SCALE)[0]
    fa3 = [{**r, "impl": "vllm_flash_attn_fa3"} for r in recs]
    assert "mha_full_ctas" not in fit_decode_split(fa3, BOUNDS, F_SCALE)[0]
    # records without an MHA shape leave the term off
    gqa_only, _ = fit_decode_split([r for r in recs if r["num_q_heads"] > r["num_kv_heads"]], BOUNDS, F_SCALE, mha=True)
    assert "mha_full_ctas" not in gqa_only

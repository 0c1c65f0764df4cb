"""Fit the attention kernels' optional terms (sim/calib/attention_terms.py) to measurements.

``microbench.fit`` uses them when the GPU's SM count is known (a GPU measurement: ``microbench
calibrate`` on a GPU, ``microbench import aiconfigurator``); a fit without one (a CPU) keeps
the plain form. Decode attention's split-KV form: the KV tile length is chosen among
``KV_BLOCKS`` by the lowest training loss (each fitted), as the GEMM's tile is, the other nine
parameters fitted. Prefill attention's head-dim and occupancy term: the query tile is given
(``Q_BLOCK``, FlashAttention's 128 rows), ``head_dim_half`` and ``full_q_ctas`` fitted with the
plain form's six, and with them the GQA-packing term's ``cta_s``, ``kv_reuse_len`` and
``max_reread`` (packed CTAs, KV re-reads capped by L2). Both by the same robust least squares on
log(predicted / measured) as every kernel.
"""

from __future__ import annotations

import math

import numpy as np

#: candidate KV tile lengths (tokens): FlashAttention-3 / FlashInfer decode tiles
KV_BLOCKS = (32, 64, 128)
Q_BLOCK = 128.0  # FlashAttention 2/3's query tile (rows)
_PREFILL_FREE = ("bandwidth_bytes_per_s", "flops_per_s", "x_half", "overhead_s", "item_s", "sharpness",
                 "head_dim_half", "full_q_ctas", "cta_s", "kv_reuse_len", "max_reread")
_FREE = ("bandwidth_bytes_per_s", "flops_per_s", "overhead_s", "item_s", "sharpness",
         "unit_s", "split_len", "max_splits", "full_ctas")
_L2_FREE = ("l2_bytes", "l2_bandwidth_bytes_per_s", "l2_sharpness")
_MHA_FREE = ("mha_full_ctas", "mha_overhead_s", "swap_s")
_MMHA_FREE = ("mmha_flops_per_s", "mmha_unit_s")
#: TensorRT-LLM's XQA kernels take 2 to 32 query heads per KV head (its JIT's supportConfigQGMMA/HMMA:
#: head_grp_size x beam_width > 32 unsupported; vanilla MHA not sent to XQA); the rest run MMHA
XQA_MAX_GROUP = 32.0
#: the tables' kernel names (``impl``) of TensorRT-LLM's attention op, whose XQA / MMHA dispatch the term describes
TRTLLM_IMPLS = ("torch_flow",)
#: whether fit_decode_split fits the MMHA-fallback term: None, on records of TRTLLM_IMPLS, kept where it lowers the loss
DECODE_MMHA: bool | None = None
#: the kernels (the records' ``impl``) that run FlashAttention-2's varlen decode, whose query-group
#: swap the unsplit-MHA term describes: vLLM's vllm_flash_attn on A100 (sm80 builds FA2) and its FA2 on L40S
FA2_VARLEN_IMPLS = ("vllm_flash_attn", "vllm_flash_attn_fa2")
#: whether fit_decode_split fits the unsplit-MHA term: None, on records of FA2_VARLEN_IMPLS (benchmarks/RESULTS.md)
DECODE_MHA: bool | None = None
#: whether fit_decode_split fits the L2-residency term: None (the default), fitted from the fit without it
#: and kept where it lowers the fit's loss and reads L2 faster than DRAM, as the GEMM's (benchmarks/RESULTS.md)
DECODE_L2: bool | None = None
_BOUNDS = {"l2_bytes": (1e5, 1e10), "l2_bandwidth_bytes_per_s": (1e9, 1e15), "l2_sharpness": (0.5, 50.0),
           "head_dim_half": (1e-3, 1e5), "full_q_ctas": (1.0, 1e6), "cta_s": (1e-12, 1e-3),
           "kv_reuse_len": (1e-3, 1e7), "max_reread": (1e-3, 1e4), "unit_s": (1e-10, 1.0), "split_len": (1.0, 1e6),
           "max_splits": (1.0, 1e4), "full_ctas": (1.0, 1e6), "mha_full_ctas": (1.0, 1e6),
           "mha_overhead_s": (1e-9, 1e-2), "swap_s": (1e-10, 1e-2), "mmha_flops_per_s": (1e9, 1e16),
           "mmha_unit_s": (1e-12, 1e-3)}


def _columns(records: list[dict]) -> tuple[np.ndarray, ...]:
    from sim.model.dtypes import DTYPE_BYTES  # noqa: PLC0415

    cols = np.array([(r["num_seqs"], r["context_len"], r["num_q_heads"], r["num_kv_heads"], r["head_dim"],
                      DTYPE_BYTES[r.get("dtype", "bf16")]) for r in records], dtype=float)
    return tuple(cols.T)


def _model(block: float, records: list[dict]):
    """The vectorized form (attention_terms.decode_split_s) over ``records`` for a parameter dict."""
    n, c, hq, hk, d, b = _columns(records)
    c_pad = np.ceil(c / block - 1e-9) * block
    kv_bytes, q_bytes, flops = n * c_pad * 2 * hk * d * b, n * 2 * hq * d * b, 4.0 * n * c_pad * hq * d

    mha, swapped = hq == hk, (hq > hk) & (hk > 1) & (n > 1)

    def model(p: dict) -> np.ndarray:
        on = p.get("mmha_flops_per_s", 0.0) > 0
        fallback = (mha | (hq > hk * p.get("xqa_max_group", XQA_MAX_GROUP))) if on else np.zeros_like(n, dtype=bool)
        units = np.where(fallback, n * hq, n * hk)  # attention_terms: MMHA's units are (sequence, query head)
        splits = np.minimum(np.maximum(1.0, c_pad / p["split_len"]), p["max_splits"])
        occ = np.minimum(1.0, units * splits / p["full_ctas"])
        if p.get("mha_full_ctas", 0.0) > 0:  # attention_terms: MHA unsplit, its own CTA count
            occ = np.where(mha, np.minimum(1.0, n * hk / p["mha_full_ctas"]), occ)
        bw = p["bandwidth_bytes_per_s"]
        if p.get("l2_bytes", 0.0) > 0:  # attention_terms.l2_seconds_per_byte
            hit = 1.0 / (1.0 + (kv_bytes / p["l2_bytes"]) ** p["l2_sharpness"])
            mem = kv_bytes * (hit / max(p["l2_bandwidth_bytes_per_s"], bw) + (1.0 - hit) / bw) / occ + q_bytes / bw
        else:
            mem = kv_bytes / (bw * occ) + q_bytes / bw
        comp = flops / np.where(fallback, p.get("mmha_flops_per_s", 1.0), p["flops_per_s"])
        hi, lo = np.maximum(mem, comp), np.minimum(mem, comp)
        s = p["sharpness"]
        fixed = p["overhead_s"]
        if p.get("mha_full_ctas", 0.0) > 0:
            fixed = np.where(mha, p["mha_overhead_s"], fixed + np.where(swapped, p["swap_s"], 0.0))
        unit = np.where(fallback, p.get("mmha_unit_s", 0.0), p["unit_s"]) * units
        return fixed + p["item_s"] * n + unit + hi * (1.0 + (lo / hi) ** s) ** (1.0 / s)

    return model


def fit_decode_split(records: list[dict], bounds: dict, f_scale: float, l2: bool | None = None,
                     mha: bool | None = None, mmha: bool | None = None) -> tuple[dict[str, float], float]:
    """(parameters, robust loss) of the split-KV form on ``records``, the best KV tile of KV_BLOCKS;
    with ``mha`` (default DECODE_MHA; None: where every record's kernel is one of FA2_VARLEN_IMPLS) the
    query-group swap term's parameters fitted too, where some records have one query head per KV head.
    ``l2`` (default DECODE_L2): True fits the L2-residency term's three parameters on every tile, False
    never; None fits it from the best fit without it, on its tile, and keeps it where it lowers the loss
    and reads L2 faster than DRAM (the GEMM's rule, microbench.fit.fit_params). ``mmha`` (default
    DECODE_MMHA; None: on records all of TRTLLM_IMPLS, kept where it lowers the loss) TensorRT-LLM's
    MMHA-fallback term, fitted from the fit without it."""
    l2 = DECODE_L2 if l2 is None else l2
    mha = DECODE_MHA if mha is None else mha
    if mha is None:
        mha = all(r.get("impl") in FA2_VARLEN_IMPLS for r in records)
    mha = mha and any(r["num_q_heads"] == r["num_kv_heads"] for r in records)
    base = _FREE + (_MHA_FREE if mha else ())
    best = _fit_split(records, bounds, f_scale, base + (_L2_FREE if l2 else ()), KV_BLOCKS)
    mmha = DECODE_MMHA if mmha is None else mmha
    if (all(r.get("impl") in TRTLLM_IMPLS for r in records) if mmha is None else mmha) and not mha:
        start = {**best[0], "mmha_flops_per_s": best[0]["flops_per_s"] / 5.0,
                 "mmha_unit_s": max(best[0]["unit_s"], 1e-9)}
        fb = _fit_split(records, bounds, f_scale, base + (_L2_FREE if l2 else ()) + _MMHA_FREE, KV_BLOCKS, start)
        if fb[1] < best[1] or mmha:
            best, base = fb, base + _MMHA_FREE
    if l2 is None:
        start = {**best[0], "l2_bytes": 32e6, "l2_sharpness": 4.0,
                 "l2_bandwidth_bytes_per_s": 3.0 * best[0]["bandwidth_bytes_per_s"]}
        warm = _fit_split(records, bounds, f_scale, base + _L2_FREE, (int(best[0]["kv_block"]),), start)
        if warm[1] < best[1] and warm[0]["l2_bandwidth_bytes_per_s"] > warm[0]["bandwidth_bytes_per_s"]:
            best = warm
    return best


def _fit_split(records: list[dict], bounds: dict, f_scale: float, free: tuple[str, ...], blocks: tuple,
               start: dict | None = None) -> tuple[dict[str, float], float]:
    """fit_decode_split's least squares over ``free`` for each KV tile of ``blocks``, from ``start`` or guesses."""
    from scipy.optimize import least_squares  # noqa: PLC0415

    t = np.array([r["time_s"] for r in records], dtype=float)
    n, c, hq, hk, d, b = _columns(records)
    kv_bytes = n * c * 2 * hk * d * b
    big = kv_bytes >= np.quantile(kv_bytes, 0.75)
    guess = {"bandwidth_bytes_per_s": float(np.median(kv_bytes[big] / t[big])),
             "flops_per_s": float(np.max(4.0 * n * c * hq * d / t)) * 1.5 or 1e12,
             "overhead_s": float(np.min(t)) * 0.5, "item_s": float(np.min(t)) * 1e-3, "sharpness": 4.0,
             "unit_s": float(np.min(t)) * 1e-3, "split_len": 256.0, "max_splits": 32.0, "full_ctas": 64.0,
             "l2_bytes": 32e6, "l2_sharpness": 4.0, "mha_full_ctas": 64.0,
             "mha_overhead_s": float(np.min(t)) * 0.5, "swap_s": float(np.min(t)) * 0.1}
    guess["l2_bandwidth_bytes_per_s"] = 3.0 * guess["bandwidth_bytes_per_s"]
    guess.update(start or {})
    all_bounds = {**bounds, **_BOUNDS}
    lo = np.log([all_bounds[p][0] for p in free])
    hi = np.log([all_bounds[p][1] for p in free])
    x0 = np.clip(np.log([max(guess[p], 1e-30) for p in free]), lo + 1e-9, hi - 1e-9)
    log_t = np.log(t)
    best = None
    for block in blocks:
        model = _model(block, records)
        res = least_squares(lambda lp: np.log(model(dict(zip(free, np.exp(lp))))) - log_t, x0,
                            bounds=(lo, hi), loss="soft_l1", f_scale=f_scale)
        if best is None or res.cost < best[1]:
            params = {"x_half": 0.0, "kv_block": float(block), **dict(zip(free, map(float, np.exp(res.x))))}
            if "mmha_flops_per_s" in free:  # given, not fitted: TensorRT-LLM's source
                params["xqa_max_group"] = XQA_MAX_GROUP
            best = params, float(res.cost)
    return best


def fit_prefill(records: list[dict], bounds: dict, f_scale: float) -> tuple[dict[str, float], float]:
    """(parameters, robust loss) of prefill attention's form with the head-dim / occupancy and the
    GQA-packing terms (sim/calib/attention_terms.py)."""
    from scipy.optimize import least_squares  # noqa: PLC0415

    from sim.calib.kernel_models import features  # noqa: PLC0415

    t = np.array([r["time_s"] for r in records], dtype=float)
    nbytes, flops, items, x = np.array([features("prefill_attention", r) for r in records], dtype=float).T
    n, q, c, hq, hk, d, b = _prefill_columns(records)
    ctas = n * hk * np.maximum(1.0, q * hq / hk / Q_BLOCK)  # packed (sequence, KV head, query tile) CTAs
    tiles = n * hk * np.ceil(q * hq / hk / Q_BLOCK - 1e-9)
    kv_bytes, r0 = n * (c + q) * 2 * hk * d * b, np.maximum(q, Q_BLOCK)

    def model(p: dict) -> np.ndarray:
        eff = x / (x + p["x_half"]) * d / (d + p["head_dim_half"]) * np.minimum(1.0, ctas / p["full_q_ctas"])
        r = r0 / p["kv_reuse_len"]
        mem = (nbytes + kv_bytes * r / (1.0 + r / p["max_reread"])) / p["bandwidth_bytes_per_s"]
        comp = flops / (p["flops_per_s"] * eff)
        hi, lo = np.maximum(mem, comp), np.minimum(mem, comp)
        s = p["sharpness"]
        return p["overhead_s"] + p["item_s"] * items + p["cta_s"] * tiles + hi * (1.0 + (lo / hi) ** s) ** (1.0 / s)

    big = nbytes >= np.quantile(nbytes, 0.75)
    guess = {"bandwidth_bytes_per_s": float(np.median(nbytes[big] / t[big])),
             "flops_per_s": float(np.max(flops / t)) * 1.5 or 1e12, "x_half": 16.0,
             "overhead_s": float(np.min(t)) * 0.5, "item_s": float(np.min(t)) * 1e-3, "sharpness": 4.0,
             "head_dim_half": 64.0, "full_q_ctas": 132.0, "cta_s": float(np.min(t)) * 1e-3,
             "kv_reuse_len": 16.0, "max_reread": 8.0}
    all_bounds = {**bounds, **_BOUNDS}
    lo = np.log([all_bounds[p][0] for p in _PREFILL_FREE])
    hi = np.log([all_bounds[p][1] for p in _PREFILL_FREE])
    x0 = np.clip(np.log([max(guess[p], 1e-30) for p in _PREFILL_FREE]), lo + 1e-9, hi - 1e-9)
    log_t = np.log(t)
    res = least_squares(lambda lp: np.log(model(dict(zip(_PREFILL_FREE, np.exp(lp))))) - log_t, x0,
                        bounds=(lo, hi), loss="soft_l1", f_scale=f_scale)
    params = {"q_block": Q_BLOCK, **dict(zip(_PREFILL_FREE, map(float, np.exp(res.x))))}
    return params, float(res.cost)


def _prefill_columns(records: list[dict]) -> tuple[np.ndarray, ...]:
    from sim.model.dtypes import DTYPE_BYTES  # noqa: PLC0415

    cols = np.array([(r["num_seqs"], r["query_len"], r["context_len"], r["num_q_heads"], r["num_kv_heads"],
                      r["head_dim"], DTYPE_BYTES[r.get("dtype", "bf16")]) for r in records], dtype=float)
    return tuple(cols.T)


def describe_split(p: dict) -> str:
    """The attention terms' parameters in words, for microbench.fit.describe."""
    if p.get("head_dim_half", 0) > 0:
        gqa = (f"; GQA-packed CTAs at {p['cta_s'] * 1e9:.1f} ns each, KV re-read up to {p['max_reread']:.1f}x "
               f"(one re-read per {p['kv_reuse_len']:.0f} query tokens)" if p.get("kv_reuse_len", 0) > 0 else "")
        return (f"head dim at d / (d + {p['head_dim_half']:.0f}), full rate from {p['full_q_ctas']:.0f} "
                f"CTAs of {p['q_block']:.0f} query rows" + gqa)
    if not p.get("full_ctas", 0) > 0 or not math.isfinite(p["full_ctas"]):
        return ""
    return (f"split-KV: {p['kv_block']:.0f}-token KV tiles, splits of {p['split_len']:.0f} tokens up to "
            f"{p['max_splits']:.0f}, full bandwidth from {p['full_ctas']:.0f} CTAs, {p['unit_s'] * 1e9:.1f} ns "
            f"per (sequence, KV head)" + _describe_swap(p) + _describe_mmha(p))


def _describe_mmha(p: dict) -> str:
    if not p.get("mmha_flops_per_s", 0) > 0:
        return ""
    return (f"; MHA and groups over {p['xqa_max_group']:.0f} on MMHA: {p['mmha_flops_per_s'] / 1e12:.2f} TFLOP/s, "
            f"{p['mmha_unit_s'] * 1e9:.1f} ns per (sequence, query head)")


def _describe_swap(p: dict) -> str:
    if not p.get("mha_full_ctas", 0) > 0:
        return ""
    return (f"; MHA unsplit, full bandwidth from {p['mha_full_ctas']:.0f} CTAs, {p['mha_overhead_s'] * 1e6:.1f} us "
            f"fixed; GQA's swapped query and output copied: {p['swap_s'] * 1e6:.1f} us")

"""Split-KV occupancy of decode attention, an optional term of the fitted ``decode_attention`` form.

Flash-decoding kernels (FlashAttention 2/3, FlashInfer, TensorRT-LLM's XQA) run one work unit
per (sequence, KV head): the query heads of a KV head's group share it. A unit walks its
sequence's KV in tiles of ``kv_block`` tokens, so a context is paid in whole tiles. When there
are too few units to fill the GPU the kernel splits each sequence's KV into pieces of about
``split_len`` tokens, up to ``max_splits``, and runs the pieces as separate CTAs. With fewer
CTAs than ``full_ctas`` (the CTAs the memory system needs to stream at full bandwidth) the KV
read runs at the fraction CTAs / full_ctas of it: a batch of one sequence with one KV head
reads at a third of HBM bandwidth on an H100 however long its context. Each unit also costs
``unit_s`` (its launch, its query load, the split combine), on top of the form's per-sequence
``item_s``. Per layer, for ``n`` sequences of mean context ``c`` with ``h_kv`` KV heads:

    c_pad  = ceil(c / kv_block) x kv_block                     whole KV tiles
    splits = min(max(1, c_pad / split_len), max_splits)
    ctas   = n x h_kv x splits
    occ    = min(1, ctas / full_ctas)
    time   = overhead_s + item_s x n + unit_s x n x h_kv
             + smax(kv_bytes(c_pad) / (bandwidth x occ) + q_bytes / bandwidth, flops(c_pad) / flops_per_s)

(q_bytes: the queries read and outputs written, once per sequence and query head). The term is
on when ``full_ctas`` > 0; calibrations without it (every one written before it existed, and
fits made without an SM count, e.g. on a CPU) predict exactly as before. Every factor is
non-decreasing in the context: kv_bytes / occ is the larger of kv_bytes and kv_bytes x
full_ctas / ctas, and c_pad / splits = min(c_pad, split_len) while the splits are not capped.
Fitted on NVIDIA's published decode-attention tables (microbench/attention_fit.py): the
held-out error on H100 SXM under vLLM 0.24 falls from 12.7% to 6.7% (benchmarks/RESULTS.md).

**Decode L2 residency** (optional, on with the split-KV term when ``l2_bytes`` > 0): the tables rerun
one kernel on the same KV, so a launch whose KV fits the L2 reads it from there. A share
h = 1 / (1 + (kv_total / l2_bytes)^l2_sharpness) of the KV bytes is read at ``l2_bandwidth_bytes_per_s``
(never below the DRAM's), the rest at ``bandwidth_bytes_per_s``. On L40S under vLLM the KV reads at
about 2.2 TB/s up to 64 MB and at 0.7 TB/s from 96 MB (its L2: 96 MB); fitted, l2_bytes 103 MB. The
simulated step uses the form without it (``cold_l2``): there each layer's KV was last read a step
earlier, with the weights of every layer read in between.

**Decode query-group swap** (optional, on with the split-KV term when ``mha_full_ctas`` > 0):
FlashAttention-2's varlen decode (vLLM's on A100 and L40S) splits the KV only for GQA, where it swaps
the ``g`` query heads of a KV head into the query-row dimension; MHA (one query head per KV head) runs
the unsplit kernel: one CTA per (sequence, head) walking the whole context, the KV read at the share
n x h_kv / ``mha_full_ctas`` of bandwidth, with its own fixed cost ``mha_overhead_s`` (no combine pass)
in place of ``overhead_s``. The swap is a view for one sequence or one KV head, else a copy of the
queries in and the output out: ``swap_s`` more per launch with n > 1 and h_kv > 1. On A100 SXM under
vLLM 0.14 the held-out error falls from 16.7% to 6.9% (benchmarks/RESULTS.md).

**Decode MMHA fallback** (optional, on with the split-KV term when ``mmha_flops_per_s`` > 0): TensorRT-LLM
runs XQA (one CTA per sequence and KV head, its query heads on tensor cores) only for 2 to ``xqa_max_group``
(32) query heads per KV head; MHA and larger groups run its masked multi-head attention kernel (MMHA): one
unit per (sequence, query head), the dot products on CUDA cores. Those launches count n x h_q units (each
``mmha_unit_s``) for the occupancy and run the math at ``mmha_flops_per_s``. On H100 SXM: 6.7 TFLOP/s and
6 ns a unit against XQA's 44 TFLOP/s and 29 ns (benchmarks/RESULTS.md).

**Prefill attention** (optional, on when ``head_dim_half`` > 0): FlashAttention's FLOP rate grows
with the head dim (more math per tile load; head dim 64 runs at 60% of 192's on an H100), and a
prefill with few (sequence, query head, query tile) CTAs cannot fill the SMs. Its compute term
runs at ``flops_per_s`` x efficiency, for ``n`` chunks of mean length ``q``:

    efficiency = d / (d + head_dim_half) x min(1, n x h_q x max(1, q / q_block) / full_q_ctas)

Compute time, FLOPs / efficiency, stays non-decreasing in n, q, h_q and d (FLOPs grow at least as
fast as the CTA count, and d / (d + head_dim_half) is below one).

**Prefill GQA packing** (optional, on with the prefill term when ``kv_reuse_len`` > 0): FlashAttention-3
under a varlen batch (vLLM's) packs the ``g = h_q / h_kv`` query heads of one KV head into one query
tile, so a CTA is a (sequence, KV head, tile of ``q_block`` packed rows) and the occupancy counts
``n x h_kv x max(1, q x g / q_block)`` CTAs; each CTA costs ``cta_s`` besides its math (its
prologue, Q load and epilogue: at one query token per sequence the time follows these CTAs, 32x more
of them for 32 heads without GQA than with one KV head). Each query tile reads the KV before it again,
and L2 holds what the tiles of a packed group share, so the KV is read about ``1 + reread`` times:

    r      = max(q, q_block) / kv_reuse_len
    reread = r / (1 + r / max_reread)                   re-reads, capped by L2 at max_reread
    time  += cta_s x n x h_kv x ceil(q x g / q_block);   bytes += kv_bytes x reread

Every factor is non-decreasing in n and q. On H100 SXM under vLLM 0.24 the held-out error falls from
10.9% to 8.0% (benchmarks/RESULTS.md); fitted there, kv_reuse_len 10 tokens and max_reread 7.5,
more re-reads at 128 tokens than an MHA prefill has query tiles: read the pair as the KV side's
effective share of bandwidth as much as a count of reads.
"""

from __future__ import annotations

import math

from sim.errors import ConfigError
from sim.model.dtypes import DTYPE_BYTES

SPLIT_PARAMS = ("unit_s", "kv_block", "split_len", "max_splits", "full_ctas")
L2_PARAMS = ("l2_bytes", "l2_bandwidth_bytes_per_s", "l2_sharpness")
MHA_PARAMS = ("mha_full_ctas", "mha_overhead_s", "swap_s")
MMHA_PARAMS = ("xqa_max_group", "mmha_flops_per_s", "mmha_unit_s")
MMHA_LIMITS = {"xqa_max_group": (1.0, 1e6), "mmha_flops_per_s": (1.0, 1e18), "mmha_unit_s": (0.0, 1.0)}
MHA_LIMITS = {"mha_full_ctas": (1.0, 1e9), "mha_overhead_s": (0.0, 1.0), "swap_s": (0.0, 1.0)}
L2_LIMITS = {"l2_bytes": (1.0, 1e12), "l2_bandwidth_bytes_per_s": (1.0, 1e16), "l2_sharpness": (0.1, 1e3)}
PREFILL_PARAMS = ("head_dim_half", "q_block", "full_q_ctas")
GQA_PARAMS = ("cta_s", "kv_reuse_len", "max_reread")
GQA_LIMITS = {"cta_s": (0.0, 1.0), "kv_reuse_len": (1e-6, 1e9), "max_reread": (0.0, 1e6)}
PREFILL_LIMITS = {"head_dim_half": (0.0, 1e6), "q_block": (1.0, 65536.0), "full_q_ctas": (1.0, 1e9)}
SPLIT_LIMITS = {"unit_s": (0.0, 10.0), "kv_block": (1.0, 65536.0), "split_len": (1.0, 1e9),
                "max_splits": (1.0, 1e6), "full_ctas": (1.0, 1e9)}


def split_on(params: dict) -> bool:
    """Whether ``params`` carry the split-KV occupancy term (full_ctas > 0)."""
    return params.get("full_ctas", 0.0) > 0


def mha_on(params: dict) -> bool:
    """Whether ``params`` carry the unsplit-MHA term (mha_full_ctas > 0, with the split-KV term)."""
    return split_on(params) and params.get("mha_full_ctas", 0.0) > 0


def mmha_on(params: dict) -> bool:
    """Whether ``params`` carry the MMHA-fallback term (mmha_flops_per_s > 0, with the split-KV term)."""
    return split_on(params) and params.get("mmha_flops_per_s", 0.0) > 0


def runs_mmha(params: dict, group: float) -> bool:
    """Whether a launch of ``group`` query heads per KV head runs the MMHA fallback (MHA or above xqa_max_group)."""
    return mmha_on(params) and (group == 1 or group > params["xqa_max_group"])


def l2_on(params: dict) -> bool:
    """Whether ``params`` carry the decode L2-residency term (l2_bytes > 0, with the split-KV term)."""
    return split_on(params) and params.get("l2_bytes", 0.0) > 0


def l2_seconds_per_byte(params: dict, kv_total: float) -> float:
    """Seconds per KV byte of a launch reading ``kv_total`` bytes: 1 / bandwidth with the L2 term off,
    else the hit share h = 1 / (1 + (kv_total / l2_bytes)^l2_sharpness) read at the L2's bandwidth
    (never below the DRAM's) and the rest at ``bandwidth_bytes_per_s``; non-decreasing in kv_total."""
    bw = params["bandwidth_bytes_per_s"]
    if not l2_on(params) or kv_total <= 0:
        return 1.0 / bw
    hit = 1.0 / (1.0 + (kv_total / params["l2_bytes"]) ** params["l2_sharpness"])
    return hit / max(params["l2_bandwidth_bytes_per_s"], bw) + (1.0 - hit) / bw


def cold_l2(params: dict) -> dict:
    """``params`` without the L2-residency term: a model's step reads each layer's KV after the
    whole model's weights and the other layers' KV have passed through L2 (the tables rerun one
    layer's kernel on the same KV), so the simulated step reads it at ``bandwidth_bytes_per_s``."""
    return {k: v for k, v in params.items() if k not in L2_PARAMS}


def prefill_on(params: dict) -> bool:
    """Whether ``params`` carry the prefill head-dim / occupancy term (head_dim_half > 0)."""
    return params.get("head_dim_half", 0.0) > 0


def gqa_on(params: dict) -> bool:
    """Whether ``params`` carry the prefill GQA-packing term (kv_reuse_len > 0, with the prefill term)."""
    return prefill_on(params) and params.get("kv_reuse_len", 0.0) > 0


def prefill_efficiency(params: dict, num_seqs: float, query_len: float, num_q_heads: float, head_dim: float,
                       num_kv_heads: float | None = None) -> float:
    """The share of ``flops_per_s`` a prefill attention of ``num_seqs`` chunks of ``query_len``
    tokens runs at (module docstring); 1.0 with the term off. With the GQA term the CTAs are packed
    (sequence, KV head, query tile) ones (``num_kv_heads`` given)."""
    if not prefill_on(params) or num_seqs <= 0 or head_dim <= 0:
        return 1.0
    if gqa_on(params) and num_kv_heads:
        ctas = num_seqs * num_kv_heads * max(1.0, query_len * num_q_heads / num_kv_heads / params["q_block"])
    else:
        ctas = num_seqs * num_q_heads * max(1.0, query_len / params["q_block"])
    return head_dim / (head_dim + params["head_dim_half"]) * min(1.0, ctas / params["full_q_ctas"])


def prefill_gqa(params: dict, num_seqs: float, query_len: float, num_q_heads: float, num_kv_heads: float,
                kv_bytes: float) -> tuple[float, float]:
    """(extra bytes, CTA seconds) of the GQA-packing term (module docstring); (0, 0) with it off."""
    if not gqa_on(params) or num_seqs <= 0 or query_len <= 0 or num_kv_heads <= 0:
        return 0.0, 0.0
    block = params["q_block"]
    r = max(query_len, block) / params["kv_reuse_len"]
    cap = params["max_reread"]
    reread = r / (1.0 + r / cap) if cap > 0 else 0.0
    tiles = math.ceil(query_len * num_q_heads / num_kv_heads / block - 1e-9)
    return kv_bytes * reread, params["cta_s"] * num_seqs * num_kv_heads * tiles


def decode_shape_s(params: dict, shape: dict) -> float:
    """decode_split_s on one measured shape (sim.calib.kernel_models.KERNELS' fields)."""
    n, b, hk, d, hq = (shape["num_seqs"], DTYPE_BYTES[shape.get("dtype", "bf16")], shape["num_kv_heads"],
                       shape["head_dim"], shape["num_q_heads"])
    return decode_split_s(params, n, n * shape["context_len"], hk, 2 * hk * d * b, n * 2 * hq * d * b, 4.0 * hq * d,
                          mha=hq == hk, q_heads=hq)


def prefill_shape_gqa(params: dict, shape: dict) -> tuple[float, float]:
    """prefill_gqa on one measured shape (sim.calib.kernel_models.KERNELS' fields)."""
    n, q, hk = shape["num_seqs"], shape["query_len"], shape["num_kv_heads"]
    kv_bytes = n * (shape["context_len"] + q) * 2 * hk * shape["head_dim"] * DTYPE_BYTES[shape.get("dtype", "bf16")]
    return prefill_gqa(params, n, q, shape["num_q_heads"], hk, kv_bytes)


def smooth_max(hi: float, lo: float, p: float) -> float:
    """(hi^p + lo^p)^(1/p) for hi >= lo (p inf: hi), as sim.calib.kernel_models.roofline_s."""
    if hi > 0 and lo > 0 and math.isfinite(p):
        return hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)
    return hi


def decode_split_s(params: dict, num_seqs: float, kv_tokens: float, num_kv_heads: float,
                   kv_bytes_per_token: float, q_bytes: float, flops_per_kv_token: float, mha: bool = False,
                   q_heads: float | None = None) -> float:
    """One decode-attention launch (module docstring) on ``num_seqs`` sequences attending to
    ``kv_tokens`` KV tokens in all (their mean context padded to whole tiles); ``mha``: one query
    head per KV head (with the unsplit-MHA term on: no splits, ``mha_full_ctas``); ``q_heads``
    (None: unknown, the MMHA-fallback term then only for ``mha``) for the MMHA-fallback term."""
    if num_seqs <= 0:
        return params["overhead_s"]
    block = params["kv_block"]
    c_pad = math.ceil(kv_tokens / num_seqs / block - 1e-9) * block
    fallback = runs_mmha(params, 1.0 if mha else (q_heads / num_kv_heads if q_heads else 0.0))
    units = num_seqs * ((q_heads or num_kv_heads) if fallback else num_kv_heads)
    if mha and mha_on(params):
        occ = min(1.0, units / params["mha_full_ctas"])
    else:
        splits = min(max(1.0, c_pad / params["split_len"]), params["max_splits"])
        occ = min(1.0, units * splits / params["full_ctas"])
    bw = params["bandwidth_bytes_per_s"]
    kv_total = num_seqs * c_pad * kv_bytes_per_token
    kv_s = kv_total * l2_seconds_per_byte(params, kv_total) / occ if l2_on(params) else kv_total / (bw * occ)
    mem = kv_s + q_bytes / bw
    comp = num_seqs * c_pad * flops_per_kv_token / params["mmha_flops_per_s" if fallback else "flops_per_s"]
    hi, lo = (mem, comp) if mem >= comp else (comp, mem)
    fixed = params["overhead_s"]
    if mha_on(params):  # FlashAttention-2's query-group swap: MHA unswapped, GQA's q and out copied
        copied = num_kv_heads > 1 and num_seqs > 1
        fixed = params["mha_overhead_s"] if mha else fixed + (params["swap_s"] if copied else 0.0)
    unit = params["mmha_unit_s"] * units if fallback else params.get("unit_s", 0.0) * num_seqs * num_kv_heads
    return fixed + params["item_s"] * num_seqs + unit + smooth_max(hi, lo, params["sharpness"])


def split_params_from_dict(raw: dict, file: str, where: str, names: tuple = SPLIT_PARAMS,
                           limits: dict = SPLIT_LIMITS, term: str = "the split-KV term") -> dict[str, float]:
    """The split-KV parameters (or with ``names`` = PREFILL_PARAMS, the prefill term's) of a
    ``params`` mapping, validated: {} when absent (the term off); all of them come together."""
    given = [name for name in names if raw.get(name) is not None]
    if not given:
        return {}
    out = {}
    for name in names:
        if name not in given:
            raise ConfigError(file, f"{where}.{name}", f"missing: {term} needs " + ", ".join(names) + " together")
        v, (lo, hi) = raw[name], limits[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:  # NaN fails too
            raise ConfigError(file, f"{where}.{name}", f"expected a number from {lo:g} to {hi:g}, got {v!r}")
        out[name] = float(v)
    return out


def attention_param_names(params: dict) -> tuple[str, ...]:
    """The optional attention parameters ``params`` carry (written with the fit)."""
    return ((SPLIT_PARAMS if split_on(params) else ()) + (L2_PARAMS if l2_on(params) else ())
            + (MHA_PARAMS if mha_on(params) else ()) + (MMHA_PARAMS if mmha_on(params) else ()) + (PREFILL_PARAMS if prefill_on(params) else ())
            + (GQA_PARAMS if gqa_on(params) else ()))


def attention_params_from_dict(kernel: str, raw: dict, file: str, where: str) -> dict[str, float]:
    """Both attention terms' parameters of ``kernel``'s ``params`` mapping, validated ({} when absent);
    each term only on its own kernel."""
    split = split_params_from_dict(raw, file, where)
    pre = split_params_from_dict(raw, file, where, PREFILL_PARAMS, PREFILL_LIMITS, "the prefill term")
    gqa = split_params_from_dict(raw, file, where, GQA_PARAMS, GQA_LIMITS, "the GQA-packing term")
    l2 = split_params_from_dict(raw, file, where, L2_PARAMS, L2_LIMITS, "the L2-residency term")
    mha = split_params_from_dict(raw, file, where, MHA_PARAMS, MHA_LIMITS, "the unsplit-MHA term")
    mmha = split_params_from_dict(raw, file, where, MMHA_PARAMS, MMHA_LIMITS, "the MMHA-fallback term")
    for term, name, key in ((split, "decode_attention", "full_ctas"), (l2, "decode_attention", "l2_bytes"),
                            (mha, "decode_attention", "mha_full_ctas"), (mmha, "decode_attention", "mmha_flops_per_s"), (pre, "prefill_attention", "head_dim_half"),
                            (gqa, "prefill_attention", "kv_reuse_len")):
        if term and kernel != name:
            raise ConfigError(file, f"{where}.{key}", f"the {key} term is for {name} only")
    if gqa and not pre:
        raise ConfigError(file, f"{where}.kv_reuse_len", "the GQA-packing term needs the prefill term "
                          "(" + ", ".join(PREFILL_PARAMS) + ")")
    if l2 and not split:
        raise ConfigError(file, f"{where}.l2_bytes", "the L2-residency term needs the split-KV term "
                          "(" + ", ".join(SPLIT_PARAMS) + ")")
    if mha and not split:
        raise ConfigError(file, f"{where}.mha_full_ctas", "the unsplit-MHA term needs the split-KV term "
                          "(" + ", ".join(SPLIT_PARAMS) + ")")
    if mmha and not split:
        raise ConfigError(file, f"{where}.mmha_flops_per_s", "the MMHA-fallback term needs the split-KV term "
                          "(" + ", ".join(SPLIT_PARAMS) + ")")
    if mmha and mha:
        raise ConfigError(file, f"{where}.mmha_flops_per_s", "one kernel's term: the MMHA-fallback term "
                          "(TensorRT-LLM) or the unsplit-MHA term (FlashAttention-2), not both")
    return split | l2 | mha | mmha | pre | gqa

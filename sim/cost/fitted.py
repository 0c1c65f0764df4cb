"""Step time composed from a calibration's fitted kernel models (measured calibrations).

Used by sim/cost.py when the calibration has a fitted ``gemm`` (schema 2); datasheet
calibrations keep cost.py's roofline. Pure: no SimPy, no I/O, no randomness. With m the
step's tokens and L the layers:

    step_time = step(num_seqs, vocab)                       fitted per-step overhead + sampling
      + sum over linear ops: L x gemm(m, n, k)              (grid where measured, else analytic)
        routed experts: touched x gemm(m top_k / touched, n, k), touched as in cost.py
      + gemm(num_seqs, vocab, hidden)                       lm_head on the sampling rows
      + L x 2 x rmsnorm(m, hidden)                          residual add + norm, twice per layer
      + L x kv_write on m tokens                            (bytes of the KV dtype)
      + L x decode_attention on the decode batch's KV tokens
      + L x prefill_attention on the chunks' (query, key) pairs and KV tokens
      + L x elementwise(m)                                  RoPE, activation, residual adds, if
                                                            measured; else their traffic over the
                                                            copy bandwidth, 2 launches per layer

and, when the calibration has a ``composition`` (sim/composition.py), the terms are
scaled (attention apart from the rest) and ``L x per_layer_s + per_step_s`` added: the
correction fitted on whole measured engine steps.

Attention and the KV write use the fitted analytic form on the batch's aggregate bytes and
FLOPs (a batch's ragged lengths match no measured shape), at saturated compute efficiency
(attention tiles queries per sequence); an item is a decoding sequence or a prefill chunk
(the CPU reference paths loop over them). Every term is non-decreasing in each argument of ``step_time_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.calib.calibration import Calibration
from sim.calib.composition import Composition
from sim.calib.kernel_models import roofline_s
from sim.model.spec import KVDtype, ModelSpec, attn_flops_per_pair, kv_bytes_per_token, linear_ops, lm_head_op

_DTYPE_NAMES = {4: "fp32", 2: "bf16", 1: "fp8", 0.5: "int4"}


def dtype_name(num_bytes: float) -> str:
    """A dtype name for an element size (the fitted models only need its bytes)."""
    return _DTYPE_NAMES.get(num_bytes, "bf16")


@dataclass(frozen=True)
class FittedStep:
    """Per-(model, calibration, dtypes) pieces of the fitted step time. Build with build_fitted_step."""

    cal: Calibration
    dtype: str
    vocab_size: int
    hidden_size: int
    dense_ops: tuple[tuple[int, int, int], ...]  # (n, k, layers)
    expert_ops: tuple[tuple[int, int, int, int, int], ...]  # (n, k, layers, num_experts, top_k)
    lm_head: tuple[int, int]  # (n, k)
    num_layers: int
    kv_bytes_per_token_layer: float
    attn_flops_per_pair_layer: float
    q_bytes_per_token_layer: float  # query read + output written by attention
    other_bytes_per_token: float  # RoPE, activation, embedding (all layers)
    attn: dict
    decode: dict
    kv_write: dict
    copy: dict
    elementwise: dict | None  # the measured per-layer elementwise work (dense models)
    other_measured_bytes_per_token: float  # what elementwise() does not cover: the embedding
    composition: Composition | None = None  # kernel sum -> measured step (None: the sum as is)


def build_fitted_step(model: ModelSpec, cal: Calibration, kv_dtype: KVDtype | str, weight_dtype_bytes: float,
                      *, quant_group_size: int = 64) -> FittedStep:
    """Precompute the shapes and per-token quantities of ``fitted_step_time_s``."""
    from sim.cost.datasheet import elementwise_bytes_per_token  # noqa: PLC0415  (cost imports this module)

    L, h = model.num_layers, model.hidden_size
    kv_bytes = kv_bytes_per_token(model, kv_dtype, quant_group_size=quant_group_size)
    dense, experts = [], []
    for op in linear_ops(model):
        if op.num_experts > 1:
            experts.append((op.n, op.k, op.num_layers, op.num_experts, op.experts_per_tok))
        else:
            dense.append((op.n, op.k, op.num_layers))
    head = lm_head_op(model)
    norms = L * 10 * h * weight_dtype_bytes  # the rmsnorm kernel's 5 h per call, 2 calls per layer
    other = max(0.0, elementwise_bytes_per_token(model, weight_dtype_bytes, kv_bytes) - kv_bytes - norms)
    elementwise = None
    if "elementwise" in cal.kernels and not model.is_mla and not model.is_moe:
        elementwise = dict(num_q_heads=model.num_attention_heads, num_kv_heads=model.num_kv_heads,
                           head_dim=model.head_dim, intermediate_size=model.intermediate_size,
                           hidden_size=h, dtype=dtype_name(weight_dtype_bytes))
    q_heads_dim = model.num_attention_heads * (model.v_head_dim if model.is_mla else model.head_dim)
    return FittedStep(
        cal=cal, dtype=dtype_name(weight_dtype_bytes), vocab_size=model.vocab_size, hidden_size=h,
        dense_ops=tuple(dense), expert_ops=tuple(experts), lm_head=(head.n, head.k), num_layers=L,
        kv_bytes_per_token_layer=kv_bytes / L, attn_flops_per_pair_layer=attn_flops_per_pair(model) / L,
        q_bytes_per_token_layer=2 * q_heads_dim * weight_dtype_bytes, other_bytes_per_token=other,
        attn=cal.kernel_params("prefill_attention"), decode=cal.kernel_params("decode_attention"),
        kv_write=cal.kernel_params("kv_write"), copy=cal.kernel_params("copy_d2d"),
        elementwise=elementwise, other_measured_bytes_per_token=h * weight_dtype_bytes,
        composition=cal.composition)


def _gemm(fs: FittedStep, m: float, n: int, k: int) -> float:
    return fs.cal.predict("gemm", m=m, n=n, k=k, dtype=fs.dtype)


def fitted_step_parts(fs: FittedStep, *, num_seqs: int, num_prefill_tokens: int, num_decode_tokens: int,
                      decode_kv_tokens: int, prefill_attn_pairs: float, prefill_kv_tokens: int,
                      num_prefill_seqs: int = 1) -> dict[str, float]:
    """The kernel sum's terms, seconds by kernel (no composition); empty without tokens."""
    m = num_prefill_tokens + num_decode_tokens
    if m <= 0:
        return {}
    cal, L = fs.cal, fs.num_layers
    parts = {"step": cal.predict("step", num_seqs=max(num_seqs, 1), vocab_size=fs.vocab_size)}
    gemm = sum(layers * _gemm(fs, m, n, k) for n, k, layers in fs.dense_ops)
    for n, k, layers, num_experts, top_k in fs.expert_ops:
        touched = num_experts * (1.0 - (1.0 - top_k / num_experts) ** m)
        gemm += layers * touched * _gemm(fs, max(1.0, m * top_k / touched), n, k)
    if num_seqs > 0:
        gemm += _gemm(fs, num_seqs, *fs.lm_head)
    parts["gemm"] = gemm
    parts["rmsnorm"] = L * 2 * cal.predict("rmsnorm", num_tokens=m, hidden_size=fs.hidden_size, dtype=fs.dtype)
    parts["kv_write"] = L * roofline_s(fs.kv_write, 2.0 * m * fs.kv_bytes_per_token_layer, 0.0, 0.0, 1.0)
    if num_decode_tokens > 0:
        nbytes = decode_kv_tokens * fs.kv_bytes_per_token_layer + num_decode_tokens * fs.q_bytes_per_token_layer
        flops = decode_kv_tokens * fs.attn_flops_per_pair_layer
        parts["decode_attention"] = L * roofline_s(fs.decode, nbytes, flops, num_decode_tokens, math.inf)
    if num_prefill_tokens > 0:
        nbytes = prefill_kv_tokens * fs.kv_bytes_per_token_layer + num_prefill_tokens * fs.q_bytes_per_token_layer
        flops = prefill_attn_pairs * fs.attn_flops_per_pair_layer
        parts["prefill_attention"] = L * roofline_s(fs.attn, nbytes, flops, max(1, num_prefill_seqs), math.inf)
    copy_bw = fs.copy["bandwidth_bytes_per_s"]
    if fs.elementwise is not None:
        parts["elementwise"] = (L * cal.predict("elementwise", num_tokens=m, **fs.elementwise)
                                + m * fs.other_measured_bytes_per_token / copy_bw)
    else:
        parts["elementwise"] = m * fs.other_bytes_per_token / copy_bw + 2 * L * fs.copy["overhead_s"]
    return parts


def fitted_step_time_s(fs: FittedStep, idle_before_s: float = 0.0, **batch) -> float:
    """Seconds of one engine step (arguments as sim.cost.step_time_s); 0.0 without tokens."""
    parts = fitted_step_parts(fs, **batch)
    if not parts:
        return 0.0
    if fs.composition is None:
        return sum(parts.values())
    return fs.composition.apply(parts, fs.num_layers, idle_before_s)


def fitted_swap_time_s(cal: Calibration, num_bytes: float) -> float:
    """Host<->device copy of ``num_bytes`` (pinned): the mean of the fitted H2D and D2H times."""
    if num_bytes <= 0:
        return 0.0
    return 0.5 * (cal.predict("copy_h2d", num_bytes=num_bytes, pinned=True)
                  + cal.predict("copy_d2h", num_bytes=num_bytes, pinned=True))

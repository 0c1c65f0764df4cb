"""The fitted cost model: step time composed from a calibration's fitted kernel models.

``build_cost_model`` (sim/cost/build.py) uses it when the calibration has a fitted ``gemm``
(schema 2, measured); datasheet calibrations get the roofline of sim/cost/datasheet.py.
Pure: no SimPy, no I/O, no randomness. With m the step's tokens and L the layers:

    step_time = step(num_seqs, vocab)                       fitted per-step overhead + sampling
      + sum over linear ops: L x gemm(m, n, k)              (grid where measured, else analytic)
        routed experts: touched x gemm(m top_k / touched, n, k), touched as in datasheet.py
      + gemm(num_seqs, vocab, hidden)                       lm_head on the sampling rows
      + L x 2 x rmsnorm(m, hidden)                          residual add + norm, twice per layer
      + L x kv_write on m tokens                            (bytes of the KV dtype)
      + L x decode_attention on the decode batch's KV tokens
      + L x prefill_attention on the chunks' (query, key) pairs and KV tokens
      + L x elementwise(m)                                  RoPE, activation, residual adds, if
                                                            measured; else their traffic over the
                                                            copy bandwidth, 2 launches per layer

and, when the calibration has a ``composition`` (sim/calib/composition.py), the terms are
scaled (attention apart from the rest) and ``L x per_layer_s + per_step_s`` added: the
correction fitted on whole measured engine steps.

Attention and the KV write use the fitted analytic form on the batch's aggregate bytes and
FLOPs (a batch's ragged lengths match no measured shape), at saturated compute efficiency
(attention tiles queries per sequence); an item is a decoding sequence or a prefill chunk
(the CPU reference paths loop over them). Decode attention with the split-KV term
(sim/calib/attention_terms.py) takes the decode batch's mean context and this GPU's KV heads,
prefill attention's head-dim / occupancy term the chunks' mean length and this GPU's query heads.
Every term is non-decreasing in each field of the batch shape, but for those two terms: the same
KV tokens over more decoding sequences, or the same (query, key) pairs over more prefill tokens,
fill more of the GPU and may take less time (sim/calib/attention_terms.py). MoE models add their routing (top-k, permute, unpermute: the bytes of
sim.model.spec.moe_routing_bytes_per_token over the copy bandwidth, plus a copy launch per
routing kernel per MoE layer).

Precision: the GEMM's math mode is resolved as in sim/cost/datasheet.py. The fitted ``gemm``
is measured per dtype (its grid rows name one): a shape whose (n, k, dtype) row was measured
uses the measurement, which includes any dequantisation. Otherwise the analytic form is
used with its fitted ``flops_per_s`` scaled by Precision.speedup(mode) (compute_peaks[mode] /
compute_peaks.bf16 x mode_efficiency[mode]) and its
bandwidth by the weight-only ``dequant`` fraction, when the calibration has those sections;
without them the fitted form is used as it is (the legacy charge, the dtype named by the
weights' element size).

Tensor parallelism (sim/model/parallel.py): the kernels are those of one GPU's share of the
model (the sharded GEMM shapes, its heads), and the collectives of sim/cost/collectives.py
(the calibration's ``interconnect``) are added after the composition, which was fitted on
one GPU's steps and so does not scale them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from sim.calib.calibration import Calibration
from sim.calib.attention_terms import cold_l2, decode_split_s, prefill_efficiency, prefill_gqa, split_on
from sim.calib.composition import Composition
from sim.calib.gemm_memory import cold_l2 as gemm_cold_l2
from sim.calib.gemm_tiles import l2_on as gemm_l2_on
from sim.calib.kernel_models import KernelFit, analytic_s, roofline_s
from sim.calib.precision import embedding_precision, gemm_precision
from sim.cost.collectives import Collectives, build_collectives, collectives_s
from sim.cost.shape import BatchShape
from sim.model.dtypes import dtype_name
from sim.model.parallel import shard_model
from sim.model.spec import (
    MOE_ROUTING_KERNELS_PER_LAYER, KVDtype, ModelSpec, attn_flops_per_pair, elementwise_bytes_per_token,
    kv_bytes_per_token, linear_ops, lm_head_op, moe_routing_bytes_per_token)


@dataclass(frozen=True)
class FittedCost:
    """Per-(model, calibration, dtypes) pieces of the fitted step time. Build with build_fitted_cost."""

    model_name: str
    calibration_name: str
    kv_dtype: KVDtype
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
    gemm_dtype: str | None = None  # the GEMMs' dtype when it is not ``dtype`` (the math mode's)
    gemm_params: KernelFit | dict | None = None  # the GEMM form for this math mode (None: as fitted)
    gemm_measured: frozenset = frozenset()  # (n, k, dtype) rows of the fitted gemm's grid
    moe_routing_bytes_per_token: float = 0.0
    moe_routing_launches: int = 0  # per step: MoE layers x routing kernels
    collectives: Collectives | None = None  # tensor parallelism (collectives.py)
    head_gemm: tuple | None = None  # (dtype, params, measured) of the lm_head when its dtype differs
    kv_heads: float = 1.0  # KV heads on one GPU (1 for MLA's latent): decode attention's split-KV term
    q_heads: float = 1.0  # query heads on one GPU and their head dim: prefill attention's term
    head_dim: float = 0.0
    decode_q_heads: float | None = None  # the query heads decode attention's MMHA-fallback term counts (None: MLA)

    def without_composition(self) -> FittedCost:
        return dataclasses.replace(self, composition=None) if self.composition is not None else self

    def _gemm(self, m: float, n: int, k: int, gemm: tuple | None = None) -> float:
        """One GEMM's time in the layers' precision, or in ``gemm`` = (dtype, params, measured)."""
        dtype, params, measured = gemm or (self.gemm_dtype, self.gemm_params, self.gemm_measured)
        dtype = dtype or self.dtype
        if params is None or (n, k, dtype) in measured:
            return self.cal.predict("gemm", m=m, n=n, k=k, dtype=dtype)
        if isinstance(params, KernelFit):  # the fitted form, its params scaled to the math mode (read cold)
            return params.predict(m=m, n=n, k=k, dtype=dtype)
        return analytic_s(params, "gemm", dict(m=m, n=n, k=k, dtype=dtype))

    def step_parts(self, shape: BatchShape) -> dict[str, float]:
        """The kernel sum's terms, seconds by kernel (no composition); empty without tokens."""
        num_seqs = shape.num_seqs
        num_prefill_tokens, num_decode_tokens = shape.num_prefill_tokens, shape.num_decode_tokens
        m = num_prefill_tokens + num_decode_tokens
        if m <= 0:
            return {}
        cal, L = self.cal, self.num_layers
        parts = {"step": cal.predict("step", num_seqs=max(num_seqs, 1), vocab_size=self.vocab_size)}
        gemm = sum(layers * self._gemm(m, n, k) for n, k, layers in self.dense_ops)
        for n, k, layers, num_experts, top_k in self.expert_ops:
            touched = num_experts * (1.0 - (1.0 - top_k / num_experts) ** m)
            gemm += layers * touched * self._gemm(max(1.0, m * top_k / touched), n, k)
        if num_seqs > 0:
            gemm += self._gemm(num_seqs, *self.lm_head, self.head_gemm)
        parts["gemm"] = gemm
        parts["rmsnorm"] = L * 2 * cal.predict("rmsnorm", num_tokens=m, hidden_size=self.hidden_size,
                                               dtype=self.dtype)
        parts["kv_write"] = L * roofline_s(self.kv_write, 2.0 * m * self.kv_bytes_per_token_layer, 0.0, 0.0, 1.0)
        if num_decode_tokens > 0:
            nbytes = (shape.decode_kv_tokens * self.kv_bytes_per_token_layer
                      + num_decode_tokens * self.q_bytes_per_token_layer)
            flops = shape.decode_kv_tokens * self.attn_flops_per_pair_layer
            parts["decode_attention"] = L * (roofline_s(self.decode, nbytes, flops, num_decode_tokens, math.inf)
                                             if not split_on(self.decode) else decode_split_s(
                self.decode, num_decode_tokens, shape.decode_kv_tokens, self.kv_heads, self.kv_bytes_per_token_layer,
                num_decode_tokens * self.q_bytes_per_token_layer, self.attn_flops_per_pair_layer,
                mha=self.q_heads == self.kv_heads, q_heads=self.decode_q_heads))
        if num_prefill_tokens > 0:
            nbytes = (shape.prefill_kv_tokens * self.kv_bytes_per_token_layer
                      + num_prefill_tokens * self.q_bytes_per_token_layer)
            chunks = max(1, shape.num_prefill_seqs)
            q = num_prefill_tokens / chunks
            flops = shape.prefill_attn_pairs * self.attn_flops_per_pair_layer / prefill_efficiency(
                self.attn, chunks, q, self.q_heads, self.head_dim, self.kv_heads)
            extra, cta_s = prefill_gqa(self.attn, chunks, q, self.q_heads, self.kv_heads,
                                       shape.prefill_kv_tokens * self.kv_bytes_per_token_layer)
            parts["prefill_attention"] = L * (roofline_s(self.attn, nbytes + extra, flops,
                                                         max(1, shape.num_prefill_seqs), math.inf) + cta_s)
        copy_bw = self.copy["bandwidth_bytes_per_s"]
        if self.elementwise is not None:
            parts["elementwise"] = (L * cal.predict("elementwise", num_tokens=m, **self.elementwise)
                                    + m * self.other_measured_bytes_per_token / copy_bw)
        else:
            parts["elementwise"] = m * self.other_bytes_per_token / copy_bw + 2 * L * self.copy["overhead_s"]
        if self.moe_routing_launches:
            parts["moe_routing"] = (m * self.moe_routing_bytes_per_token / copy_bw
                                    + self.moe_routing_launches * self.copy["overhead_s"])
        return parts

    def step_time_s(self, shape: BatchShape, idle_before_s: float = 0.0) -> float:
        """The kernel sum, through the composition if there is one; 0.0 without tokens."""
        parts = self.step_parts(shape)
        if not parts:
            return 0.0
        if self.composition is None:
            t = sum(parts.values())
        else:
            t = self.composition.apply(parts, self.num_layers, idle_before_s)
        if self.collectives is not None:
            t += collectives_s(self.collectives, shape.num_prefill_tokens + shape.num_decode_tokens, shape.num_seqs)
        return t

    def staging_time_s(self, num_bytes: float, num_launches: int = 1) -> float:
        """The fitted device-to-device copy, once per launch on its share of the bytes."""
        if num_bytes <= 0:
            return 0.0
        launches = max(1, num_launches)
        return launches * self.cal.predict("copy_d2d", num_bytes=num_bytes / launches)

    def swap_time_s(self, num_bytes: float, num_copies: int = 1) -> float:
        """Per copy, the mean of the fitted pinned H2D and D2H times of its share of the bytes."""
        if num_bytes <= 0:
            return 0.0
        copies = max(1, num_copies)
        per_copy = num_bytes / copies
        return copies * (0.5 * (self.cal.predict("copy_h2d", num_bytes=per_copy, pinned=True)
                                + self.cal.predict("copy_d2h", num_bytes=per_copy, pinned=True)))


def _gemm_precision(cal: Calibration, weight_dtype: str | None, weight_dtype_bytes: float,
                    compute_dtype: str | None, gp=None) -> tuple[str | None, dict | None, frozenset, float]:
    """(the GEMMs' dtype, the analytic params for the math mode, the measured (n, k, dtype)
    rows, activation bytes); (None, None, frozenset(), weight bytes) without precision sections.
    The form is the fitted gemm with its params scaled (a plain roofline without a fitted gemm).
    ``gp``: the GemmPrecision when the caller has it (the layers' or the lm_head's)."""
    gp = gp or gemm_precision(cal, weight_dtype, weight_dtype_bytes, compute_dtype)
    fit = cal.kernels.get("gemm")
    if cal.precision is None:  # the fitted gemm as it is, its weights read cold (sim/calib/gemm_memory.py)
        cold = fit is not None and gemm_l2_on(fit.params)
        return None, dataclasses.replace(fit, params=gemm_cold_l2(fit.params)) if cold else None, frozenset(), gp.act_bytes
    if gp.weight_only:
        dtype = weight_dtype or dtype_name(weight_dtype_bytes)
    elif gp.compute in ("bf16", "fp16", "fp16-acc16"):
        dtype = dtype_name(weight_dtype_bytes)  # 16-bit GEMMs: the legacy name (bf16 and fp16 run alike)
    else:
        dtype = gp.compute
    params = gemm_cold_l2(dict(cal.kernel_params("gemm")))  # a step reads its weights cold
    params["flops_per_s"] *= cal.precision.speedup(gp.compute)
    params["bandwidth_bytes_per_s"] *= gp.weight_read_efficiency
    if fit is None:
        return dtype, params, frozenset(), gp.act_bytes
    # torch.matmul measures fp16 with fp32 accumulate: fp16-acc16 always takes the scaled form
    measured = frozenset(row.key for row in fit.grid) if gp.compute != "fp16-acc16" else frozenset()
    return dtype, dataclasses.replace(fit, params=params, grid=()), measured, gp.act_bytes


def build_fitted_cost(model: ModelSpec, cal: Calibration, kv_dtype: KVDtype | str = KVDtype.BF16,
                      weight_dtype_bytes: float = 2, *, quant_group_size: int = 64,
                      weight_dtype: str | None = None, compute_dtype: str | None = None,
                      embedding_dtype: str | None = None, tensor_parallel_size: int = 1) -> FittedCost:
    """Precompute the shapes and per-token quantities of ``FittedCost.step_time_s``; with
    ``tensor_parallel_size`` > 1 those of one GPU's share, plus the collectives. The lm_head
    runs in its own dtype where it differs from the layers' (sim.calib.precision.embedding_precision)."""
    gp = gemm_precision(cal, weight_dtype, weight_dtype_bytes, compute_dtype)
    collectives = build_collectives(model, cal, tensor_parallel_size, gp.act_bytes, cal.kernel_launch_s)
    name, model = model.name, shard_model(model, tensor_parallel_size)  # the model itself on one GPU
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
    gemm_dtype, gemm_params, measured, act_bytes = _gemm_precision(cal, weight_dtype, weight_dtype_bytes,
                                                                   compute_dtype, gp)
    head_bytes, hp = embedding_precision(cal, weight_dtype, weight_dtype_bytes, compute_dtype, embedding_dtype)
    head_gemm = None
    if head_bytes != weight_dtype_bytes or hp != gp:
        head_name = dtype_name(head_bytes)
        head_gemm = _gemm_precision(cal, head_name, head_bytes, None, hp)[:3]
        if head_gemm[0] is None:  # no precision sections: the legacy GEMM of the lm_head's element size
            head_gemm = (head_name, None, frozenset())
    routing_launches = model.num_moe_layers * MOE_ROUTING_KERNELS_PER_LAYER if model.is_moe else 0
    return FittedCost(
        model_name=name, calibration_name=cal.name, kv_dtype=KVDtype(kv_dtype),
        cal=cal, dtype=dtype_name(weight_dtype_bytes), vocab_size=model.vocab_size, hidden_size=h,
        dense_ops=tuple(dense), expert_ops=tuple(experts), lm_head=(head.n, head.k), num_layers=L,
        kv_bytes_per_token_layer=kv_bytes / L, attn_flops_per_pair_layer=attn_flops_per_pair(model) / L,
        q_bytes_per_token_layer=2 * q_heads_dim * weight_dtype_bytes, other_bytes_per_token=other,
        attn=cal.kernel_params("prefill_attention"), decode=cold_l2(cal.kernel_params("decode_attention")),
        kv_write=cal.kernel_params("kv_write"), copy=cal.kernel_params("copy_d2d"),
        elementwise=elementwise, other_measured_bytes_per_token=h * weight_dtype_bytes,
        composition=cal.composition, gemm_dtype=gemm_dtype, gemm_params=gemm_params, gemm_measured=measured,
        moe_routing_bytes_per_token=moe_routing_bytes_per_token(model, act_bytes),
        moe_routing_launches=routing_launches, collectives=collectives, head_gemm=head_gemm,
        kv_heads=1.0 if model.is_mla else float(model.num_kv_heads), q_heads=float(model.num_attention_heads),
        head_dim=float(model.head_dim), decode_q_heads=None if model.is_mla else float(model.num_attention_heads))

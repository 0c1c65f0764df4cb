"""The datasheet cost model: a roofline over a GPU's datasheet numbers. Pure: no SimPy, no I/O,
no randomness.

``build_datasheet_cost`` folds a ModelSpec and a Calibration into a frozen ``DatasheetCost``
of per-step constants once; ``step_time_s`` is then plain float arithmetic (it runs once per
simulated engine step). Notation: m = tokens in the step (prefill + decode), B = peak
memory bandwidth x bandwidth_efficiency, F = the GEMMs' peak (peak_flops for bf16; see
Precision below), eff(m) = eff_max x m / (m + m_half).

    step_time = step_overhead_s                                   (0 for an empty step)
      + sum over linear ops (qkv, o, gate_up, down; MLA projections; MoE router/experts):
            layers x smax(weight_bytes / B, 2 m n k / (F eff(m))) + layers x max(kernel_launch_s, gemm_fixed_s)
        routed experts: of E experts, m tokens x top-k touch E (1 - (1 - k/E)^m) on average;
        only those are read, and each sees m k / touched rows
      + lm_head: the same with m = num_seqs (only each sequence's last token needs logits), in
        its own dtype: bf16 beside quantized layers (sim/model/dtypes.py embedding_dtype)
      + decode attention: decode_kv_tokens x kv_bytes_per_token / B (x decode_kv_reads, the query
        heads per KV head, under a profile whose kernel reads a KV head once per query head), or
        its math when that takes longer, decode_kv_tokens x decode_attn_flops_per_pair / (F_bf16
        eff_max): only MLA's absorbed decode is compute-bound
      + prefill attention: prefill_attn_pairs x attn_flops_per_pair / (F eff_max)
                           + prefill_kv_tokens x kv_bytes_per_token / B
        (attention kernels tile queries by sequence, so their efficiency is taken as the
        saturated eff_max rather than eff(m))
      + non-GEMM traffic (norms, residual adds, RoPE, activation, embedding lookup, KV write):
            m x elementwise_bytes_per_token / B
      + layers x (NON_GEMM_KERNELS_PER_LAYER + 1 attention kernel) x kernel_launch_s
      + MoE layers x MOE_LAYER_FIXED_S (routing and its kernels' floors, graphs or not)

Since m x 2nk / (F eff(m)) = 2nk (m + m_half) / (F eff_max), a GEMM's compute time is
linear in m with a floor: that is what the per-op constants store. ``smax(a, b) = (a^p +
b^p)^(1/p)`` with p = RIDGE_SHARPNESS (sim/calib/kernel_models.py: 1.5, fitted on real A100
linear-layer timings) is a smooth maximum: a GEMM near the ridge, where its weight reads and
its math take about as long, costs up to 2^(1/p) = 1.6x the larger of the two, as measured;
far from the ridge it is the roofline's max. ``gemm_fixed_s`` (a calibration's, 0 where it has
none) is a GEMM kernel's device time besides its reads and math in a stream of kernels: decode
GEMVs timed back to back fit t = t0 + bytes / B with t0 of a few microseconds (the DRAM
pipeline's fill and drain, the last wave's tail, the gap to the next kernel), once per GEMM of
every layer. The host's launch (``kernel_launch_s``, or a graph replay's ``graph_kernel_s``)
overlaps it, so a GEMM costs the longer of the two.

MoE layers add their routing (sim.model.spec.moe_routing_bytes_per_token): the router's
top-k, the token permute and unpermute (m x top_k x hidden activations read and written
twice per MoE layer) over B, and MOE_ROUTING_KERNELS_PER_LAYER launches per MoE layer.

Attention data parallelism (``attention_data_parallel``, sim/model/memory.py): attention
projections, elementwise traffic, KV reads and attention math on 1/tp of the step's tokens, the
MLP on all; an all-gather and a reduce-scatter around each MLP replace the two all-reduces.

Precision (sim/calib/precision.py): F is the peak of the GEMMs' math mode, ``compute_dtype``
(the scenario's ``engine.compute_dtype``): peak_flops x compute_peaks[mode] / compute_peaks.bf16
x mode_efficiency[mode] (1 where the calibration has none; fp8 on Hopper and Ada: 0.86), which on
a datasheet is compute_peaks[mode] x mode_efficiency[mode]. None follows the weights:

- bf16 / fp32 weights: bf16; fp16 weights: fp16 (its peak if the calibration lists one);
- fp8 weights: fp8 (W8A8-FP8, as vLLM and TensorRT-LLM run fp8 checkpoints) where the
  calibration has an fp8 peak; else bf16, weight-only (vLLM's fp8 Marlin on Ampere);
- int8 / int4 weights: bf16 with weight-only dequantisation (W8A16 / W4A16: vLLM's Marlin
  and Machete kernels);
- ``compute_dtype: int8`` with int8 weights is W8A8 int8 (SmoothQuant); ``fp8`` with fp8
  weights W8A8-FP8; ``fp16-acc16`` fp16 inputs with fp16 accumulate (GeForce: twice fp16).

int8, int4 or fp8 weights under a 16-bit mode (bf16, fp16, fp16-acc16) are weight-only: each
GEMM reads its weights at ``dequant.<dtype>`` x B (the dequantisation the kernel does on the
way to the tensor cores), its compute at the 16-bit peak. Non-GEMM activations (norms,
residual adds, RoPE, MLP activation, MoE permutes) stay 16-bit whatever the weights (fp32
weights: 4 bytes). Attention runs at the bf16 peak (``peak_flops``). A mode the calibration
lacks is a ConfigError naming ``compute_peaks.<mode>``. A calibration without
``compute_peaks`` and ``dequant`` keeps the legacy charge: every mode at ``peak_flops``,
activations in the weight dtype, weights over B.

Tensor parallelism (``tensor_parallel_size`` = tp > 1, sim/model/parallel.py): every term
above is one GPU's, on its share of the model (sharded GEMM shapes, its attention and KV
heads, its slice of the vocabulary), and the step adds the collectives of the calibration's
``interconnect`` (sim/calib/interconnect.py), each with a kernel launch:

      + (2 x layers + 1) all-reduces of m x hidden x activation bytes (after attention's O
        projection and after the MLP's down projection, and the vocab-parallel embedding's)
      + one all-gather of the logits (num_seqs x vocab x activation bytes)

(sim/cost/collectives.py; where the calibration measured NCCL's all-reduce times and the engine
sends a message that size to NCCL, the all-reduces take the measured curve's times instead).

Measured calibrations (schema 2, with a fitted ``gemm``) use the fitted kernel models
instead: sim/cost/fitted.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sim.calib.calibration import Calibration
from sim.calib.kernel_models import RIDGE_SHARPNESS
from sim.calib.precision import embedding_precision, gemm_precision
from sim.cost.collectives import Collectives, build_collectives, collectives_s
from sim.cost.shape import BatchShape
from sim.model.parallel import shard_model
from sim.model.spec import (
    ATTENTION_OPS, MOE_ROUTING_KERNELS_PER_LAYER, KVDtype, ModelSpec, attn_flops_per_pair, decode_attn_flops_per_pair,
    elementwise_bytes_per_token,
    kv_bytes_per_token, linear_ops, lm_head_op, moe_routing_bytes_per_token)

#: A MoE layer's fixed time per step (routing, align/sort, its kernels' floors; graphs or not), s:
#: fitted on 134 published fused-MoE kernel timings of 6 sources (A100/H100/B200, 1-4,096 tokens;
#: benchmarks/moe_kernels/fit_expert_m_half.py): 0 / 20 / 30 / 40 us give 38.3 / 15.7 / 9.4 / 18.5%.
MOE_LAYER_FIXED_S = 30e-6

#: Kernels per layer besides GEMMs and attention: two fused add+norms, RoPE, the MLP
#: activation and the KV cache write (vLLM's reshape_and_cache).
NON_GEMM_KERNELS_PER_LAYER = 5

#: One host<->device copy's fixed cost (a cudaMemcpyAsync's launch and DMA setup) where
#: the calibration has no measured copy overhead. Engines swap KV block by block, per
#: layer, for K and V: small blocks mean many copies (the PagedAttention paper's Fig. 19).
PCIE_COPY_LATENCY_S = 10e-6


@dataclass(frozen=True)
class DatasheetCost:
    """Per-(model, calibration, dtypes) constants of the roofline. Build with build_datasheet_cost.

    ``dense_ops``: (weight_s, flop_s_per_row, launch_s) per op, summed over its layers:
    time(m) = max(weight_s, flop_s_per_row x (m + m_half_tokens)) + launch_s.
    ``expert_ops``: (weight_s_per_expert, flop_s_per_row, launch_s, num_experts, top_k).
    """

    model_name: str
    calibration_name: str
    kv_dtype: KVDtype
    m_half_tokens: float
    dense_ops: tuple[tuple[float, float, float], ...]
    expert_ops: tuple[tuple[float, float, float, int, int], ...]
    lm_head: tuple[float, float, float]
    kv_read_s_per_token: float  # kv_bytes_per_token / B
    attn_s_per_pair: float  # attn_flops_per_pair / (F eff_max)
    elementwise_s_per_token: float
    fixed_step_s: float  # step_overhead_s + non-GEMM and attention launches
    pcie_bandwidth_bytes_per_s: float
    device_copy_bytes_per_s: float = float("inf")  # achieved device memory bandwidth (staging copies)
    kernel_launch_s: float = 0.0
    compute_dtype: str = "bf16"  # the GEMMs' math mode (sim/calib/precision.py gemm_precision)
    #: tensor parallelism's collectives (None: one GPU): (all-reduces per step, fixed seconds
    #: and seconds per token of each, the logits all-gather's fixed seconds and seconds per row)
    collectives: Collectives | None = None
    #: the GEMMs' smooth maximum of weight reads and math (module docstring); inf: the hard max
    ridge_sharpness: float = float("inf")
    #: times decode attention reads each KV head: 1, or its query heads where the engine's kernel
    #: does not share a KV head's reads across its group (EngineProfile.gqa_shared_kv_reads)
    decode_kv_reads: float = 1.0
    #: attention data parallelism (engine.attention_data_parallel): the GPUs a step's requests are
    #: spread over for attention (1: none), and how many of ``dense_ops`` (the first) are attention's
    attention_ranks: int = 1
    attention_ops: int = 0
    #: a decode (query, key) pair's attention math, decode_attn_flops_per_pair / (F eff_max), decode attention
    #: the longer of its KV reads and this; 0.0 where the reads always take longer (all but MLA's absorbed form)
    decode_attn_s_per_pair: float = 0.0

    @property
    def composition(self) -> None:
        """A datasheet roofline has no measured composition."""
        return None

    def without_composition(self) -> DatasheetCost:
        return self

    def step_time_s(self, shape: BatchShape, idle_before_s: float = 0.0) -> float:
        """Seconds one engine step takes; 0.0 when it has no tokens (``idle_before_s`` is unused)."""
        m = shape.num_prefill_tokens + shape.num_decode_tokens
        if m <= 0:
            return 0.0
        num_seqs, ranks = shape.num_seqs, self.attention_ranks
        t = self._token_terms_s(m, num_seqs)
        r = self.kv_read_s_per_token if ranks == 1 else self.kv_read_s_per_token / ranks
        reads = shape.decode_kv_tokens * self.decode_kv_reads
        t += (reads + shape.prefill_kv_tokens) * r
        if self.collectives is not None:
            t += collectives_s(self.collectives, m, num_seqs)
        t += self._decode_math_s(shape.decode_kv_tokens, reads * r)
        if ranks > 1:  # each GPU attends over its own requests: an even share of them
            return t + shape.prefill_attn_pairs * self.attn_s_per_pair / ranks
        return t + shape.prefill_attn_pairs * self.attn_s_per_pair

    def _token_terms_s(self, m: int, num_seqs: int) -> float:
        """The step's terms that depend only on its m tokens and ``num_seqs`` rows (fixed,
        elementwise, GEMMs, lm_head), summed in ``step_time_s``'s order."""
        m_half, p = self.m_half_tokens, self.ridge_sharpness
        if self.attention_ranks > 1:  # attention and the per-token work on one rank's share of the tokens
            m_attn = m / self.attention_ranks
            t = self.fixed_step_s + m_attn * self.elementwise_s_per_token
            for i, (weight_s, flop_s, launch_s) in enumerate(self.dense_ops):
                t += smax(weight_s, flop_s * ((m_attn if i < self.attention_ops else m) + m_half), p) + launch_s
        else:
            t = self.fixed_step_s + m * self.elementwise_s_per_token
            for weight_s, flop_s, launch_s in self.dense_ops:
                t += smax(weight_s, flop_s * (m + m_half), p) + launch_s
        for weight_s, flop_s, launch_s, num_experts, top_k in self.expert_ops:
            touched = num_experts * (1.0 - (1.0 - top_k / num_experts) ** m)
            t += smax(weight_s * touched, flop_s * (m * top_k + touched * m_half), p) + launch_s
        if num_seqs > 0:
            weight_s, flop_s, launch_s = self.lm_head
            t += smax(weight_s, flop_s * (num_seqs + m_half), p) + launch_s
        return t

    def _decode_math_s(self, kv_tokens: float, read_s: float) -> float:
        """What decode attention's math takes beyond its KV reads (``read_s``): 0.0 while reads bind."""
        if self.decode_attn_s_per_pair <= 0.0 or kv_tokens <= 0:
            return 0.0
        a = self.decode_attn_s_per_pair if self.attention_ranks == 1 else self.decode_attn_s_per_pair / self.attention_ranks
        return max(0.0, kv_tokens * a - read_s)

    def decode_time_fn(self, num_seqs: int, num_tokens: int) -> Callable[[int], float]:
        """``kv -> step_time_s(BatchShape(num_seqs, 0, num_tokens, kv, 0.0, 0, 0))``, the same
        float, with the terms that do not depend on ``kv`` added up once (macro-steps: a
        stretch of decodes changes only its KV tokens)."""
        if num_tokens <= 0:
            return lambda kv: 0.0
        t0, r, g = self._token_terms_s(num_tokens, num_seqs), self.kv_read_s_per_token, self.decode_kv_reads
        if self.attention_ranks > 1:
            r /= self.attention_ranks  # each GPU reads its own requests' KV (step_time_s's same float)
        c = 0.0 if self.collectives is None else collectives_s(self.collectives, num_tokens, num_seqs)
        if self.decode_attn_s_per_pair > 0.0:  # step_time_s's floats, the math term after the collectives
            a = self.decode_attn_s_per_pair if self.attention_ranks == 1 else self.decode_attn_s_per_pair / self.attention_ranks

            def with_math(kv: int) -> float:  # _decode_math_s inlined: max(0.0, kv * a - reads) for kv > 0
                reads = kv * g * r
                t = t0 + reads + c
                if kv <= 0:
                    return t + 0.0
                m = kv * a - reads
                return t + (m if m > 0.0 else 0.0)
            return with_math
        if g != 1.0:  # (kv x g) x r: step_time_s's float
            return lambda kv: t0 + kv * g * r + c
        if self.collectives is None:
            return lambda kv: t0 + kv * r
        return lambda kv: t0 + kv * r + c

    def staging_time_s(self, num_bytes: float, num_launches: int = 1) -> float:
        """A device-to-device copy of ``num_bytes`` (read and write) plus a launch per kernel."""
        if num_bytes <= 0:
            return 0.0
        launches = max(1, num_launches)
        return 2.0 * num_bytes / self.device_copy_bytes_per_s + launches * self.kernel_launch_s

    def swap_time_s(self, num_bytes: float, num_copies: int = 1) -> float:
        """``num_bytes`` over the PCIe bandwidth plus PCIE_COPY_LATENCY_S per copy."""
        if num_bytes <= 0:
            return 0.0
        copies = max(1, num_copies)
        return num_bytes / self.pcie_bandwidth_bytes_per_s + copies * PCIE_COPY_LATENCY_S


_INF = float("inf")


def smax(a: float, b: float, p: float) -> float:
    """(a^p + b^p)^(1/p) for a, b >= 0: max(a, b) when p is inf or either is 0."""
    hi, lo = (a, b) if a >= b else (b, a)
    if lo <= 0.0 or p == _INF:
        return hi
    return hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)


def build_datasheet_cost(model: ModelSpec, calibration: Calibration, kv_dtype: KVDtype | str = KVDtype.BF16,
                         weight_dtype_bytes: float = 2, *, quant_group_size: int = 64,
                         weight_dtype: str | None = None, compute_dtype: str | None = None,
                         embedding_dtype: str | None = None, tensor_parallel_size: int = 1,
                         attention_data_parallel: bool = False) -> DatasheetCost:
    """Precompute the constants of ``DatasheetCost.step_time_s``; ``weight_dtype`` and
    ``compute_dtype`` pick the math mode and dequantisation, ``embedding_dtype`` the lm_head's
    (sim.calib.precision.embedding_precision), ``tensor_parallel_size`` the GPUs the model is split
    over, ``attention_data_parallel`` whether they run attention data-parallel (module docstring)."""
    cal = calibration
    gp = gemm_precision(cal, weight_dtype, weight_dtype_bytes, compute_dtype)
    dp = attention_data_parallel and tensor_parallel_size > 1
    collectives = build_collectives(model, cal, tensor_parallel_size, gp.act_bytes, cal.kernel_launch_s, dp)
    name, model = model.name, shard_model(model, tensor_parallel_size, dp)  # the model itself on one GPU
    bw = cal.effective_bandwidth_bytes_per_s
    weight_bw = bw * gp.weight_read_efficiency
    flops = gp.peak_flops * cal.compute_eff_max
    launch = cal.kernel_launch_s
    gemm_launch = max(launch, cal.gemm_fixed_s)  # a GEMM's launch (or graph gap) or its fixed device time
    dense, experts = [], []
    ops = linear_ops(model)
    attention_ops = sum(op.name in ATTENTION_OPS for op in ops)  # linear_ops lists them first
    for op in ops:
        w = op.k * op.n * weight_dtype_bytes * op.num_layers / weight_bw
        f = 2 * op.k * op.n * op.num_layers / flops
        if op.num_experts > 1:
            experts.append((w, f, op.num_layers * gemm_launch, op.num_experts, op.experts_per_tok))
        else:
            dense.append((w, f, op.num_layers * gemm_launch))
    head, decode_math = lm_head_op(model), decode_attn_flops_per_pair(model) / (cal.peak_flops * cal.compute_eff_max)
    head_bytes, hp = embedding_precision(cal, weight_dtype, weight_dtype_bytes, compute_dtype, embedding_dtype)
    head_bw, head_flops = bw * hp.weight_read_efficiency, hp.peak_flops * cal.compute_eff_max
    kv_bytes = kv_bytes_per_token(model, kv_dtype, quant_group_size=quant_group_size)
    kernels = model.num_layers * (NON_GEMM_KERNELS_PER_LAYER + 1)
    kernels += model.num_moe_layers * MOE_ROUTING_KERNELS_PER_LAYER if model.is_moe else 0
    traffic = elementwise_bytes_per_token(model, gp.act_bytes, kv_bytes)
    if model.is_moe:
        traffic += moe_routing_bytes_per_token(model, gp.act_bytes)
    return DatasheetCost(
        model_name=name, calibration_name=cal.name, kv_dtype=KVDtype(kv_dtype),
        m_half_tokens=cal.compute_m_half_tokens, dense_ops=tuple(dense), expert_ops=tuple(experts),
        lm_head=(head.k * head.n * head_bytes / head_bw, 2 * head.k * head.n / head_flops, gemm_launch),
        kv_read_s_per_token=kv_bytes / bw,
        attn_s_per_pair=attn_flops_per_pair(model) / (cal.peak_flops * cal.compute_eff_max),
        elementwise_s_per_token=traffic / bw,
        fixed_step_s=cal.step_overhead_s + kernels * launch + (model.num_moe_layers * MOE_LAYER_FIXED_S
                                                               if model.is_moe else 0.0),
        pcie_bandwidth_bytes_per_s=cal.pcie_bandwidth_bytes_per_s,
        device_copy_bytes_per_s=cal.effective_bandwidth_bytes_per_s, kernel_launch_s=cal.kernel_launch_s,
        compute_dtype=gp.compute, collectives=collectives, ridge_sharpness=RIDGE_SHARPNESS,
        attention_ranks=tensor_parallel_size if dp else 1, attention_ops=attention_ops if dp else 0,
        decode_attn_s_per_pair=decode_math if decode_math > kv_bytes / bw else 0.0,  # reads >= 1 a KV head
    )

"""Step-time cost model: a batch's shape in, seconds out. Pure: no SimPy, no I/O, no randomness.

``build_cost_model`` folds a ModelSpec and a Calibration into a frozen ``CostModel`` of
per-step constants once; ``step_time_s`` is then plain float arithmetic (it runs once per
simulated engine step). Notation: m = tokens in the step (prefill + decode), B = peak
memory bandwidth x bandwidth_efficiency, F = peak_flops, eff(m) = eff_max x m / (m + m_half).

    step_time = step_overhead_s                                   (0 for an empty step)
      + sum over linear ops (qkv, o, gate_up, down; MLA projections; MoE router/experts):
            layers x max(weight_bytes / B, 2 m n k / (F eff(m))) + layers x kernel_launch_s
        routed experts: of E experts, m tokens x top-k touch E (1 - (1 - k/E)^m) on average;
        only those are read, and each sees m k / touched rows
      + lm_head: the same with m = num_seqs (only each sequence's last token needs logits)
      + decode attention: decode_kv_tokens x kv_bytes_per_token / B
      + prefill attention: prefill_attn_pairs x attn_flops_per_pair / (F eff_max)
                           + prefill_kv_tokens x kv_bytes_per_token / B
        (attention kernels tile queries by sequence, so their efficiency is taken as the
        saturated eff_max rather than eff(m))
      + non-GEMM traffic (norms, residual adds, RoPE, activation, embedding lookup, KV write):
            m x elementwise_bytes_per_token / B
      + layers x (NON_GEMM_KERNELS_PER_LAYER + 1 attention kernel) x kernel_launch_s

Since m x 2nk / (F eff(m)) = 2nk (m + m_half) / (F eff_max), a GEMM's compute time is
linear in m with a floor: that is what the per-op constants store.

Measured calibrations (schema 2, with a fitted ``gemm``) are composed from the fitted
kernel models instead: see sim/cost_fitted.py. The datasheet formula above is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.calib.calibration import Calibration
from sim.cost.fitted import FittedStep, build_fitted_step, fitted_step_time_s, fitted_swap_time_s
from sim.model.spec import (
    KVDtype, MlpKind, ModelSpec, attn_flops_per_pair, kv_bytes_per_token, linear_ops, lm_head_op)

#: Kernels per layer besides GEMMs and attention: two fused add+norms, RoPE, the MLP
#: activation and the KV cache write (vLLM's reshape_and_cache).
NON_GEMM_KERNELS_PER_LAYER = 5


@dataclass(frozen=True)
class CostModel:
    """Per-(model, calibration, dtypes) constants for ``step_time_s``. Build with build_cost_model.

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
    fitted: FittedStep | None = None  # set for calibrations with fitted kernel models
    device_copy_bytes_per_s: float = float("inf")  # achieved device memory bandwidth (staging copies)
    kernel_launch_s: float = 0.0


def elementwise_bytes_per_token(model: ModelSpec, act_bytes: float, kv_bytes: float) -> float:
    """Bytes of non-GEMM memory traffic per token of a step, all layers.

    Per layer: two RMS/LayerNorms (read + write hidden: 4h), two residual adds (6h), RoPE
    on q and k (read + write), the MLP activation (read gate and up, write: 3 x
    intermediate; MoE: for top-k routed plus shared experts). Plus the embedding row and
    the KV cache write (``kv_bytes``, already in the KV dtype).
    """
    h = model.hidden_size
    if model.is_mla:
        rope = 2 * (model.num_attention_heads + 1) * model.qk_rope_head_dim
    else:
        rope = 2 * (model.num_attention_heads + model.num_kv_heads) * model.head_dim
    act = 3 if model.mlp is MlpKind.GATED else 2
    dense = model.num_dense_mlp_layers * act * model.intermediate_size
    moe = 0
    if model.is_moe:
        moe = model.num_moe_layers * 3 * model.moe_intermediate_size * (
            model.num_experts_per_tok + model.num_shared_experts)
    elements = model.num_layers * (10 * h + rope) + dense + moe + h
    return elements * act_bytes + kv_bytes


def build_cost_model(model: ModelSpec, calibration: Calibration, kv_dtype: KVDtype | str = KVDtype.BF16,
                     weight_dtype_bytes: float = 2, *, quant_group_size: int = 64) -> CostModel:
    """Precompute the constants of ``step_time_s`` (activations are in the weight dtype)."""
    cal = calibration
    bw = cal.effective_bandwidth_bytes_per_s
    flops = cal.peak_flops * cal.compute_eff_max
    launch = cal.kernel_launch_s
    dense, experts = [], []
    for op in linear_ops(model):
        w = op.k * op.n * weight_dtype_bytes * op.num_layers / bw
        f = 2 * op.k * op.n * op.num_layers / flops
        if op.num_experts > 1:
            experts.append((w, f, op.num_layers * launch, op.num_experts, op.experts_per_tok))
        else:
            dense.append((w, f, op.num_layers * launch))
    head = lm_head_op(model)
    kv_bytes = kv_bytes_per_token(model, kv_dtype, quant_group_size=quant_group_size)
    kernels = model.num_layers * (NON_GEMM_KERNELS_PER_LAYER + 1)
    return CostModel(
        model_name=model.name, calibration_name=cal.name, kv_dtype=KVDtype(kv_dtype),
        m_half_tokens=cal.compute_m_half_tokens, dense_ops=tuple(dense), expert_ops=tuple(experts),
        lm_head=(head.k * head.n * weight_dtype_bytes / bw, 2 * head.k * head.n / flops, launch),
        kv_read_s_per_token=kv_bytes / bw,
        attn_s_per_pair=attn_flops_per_pair(model) / flops,
        elementwise_s_per_token=elementwise_bytes_per_token(model, weight_dtype_bytes, kv_bytes) / bw,
        fixed_step_s=cal.step_overhead_s + kernels * launch,
        pcie_bandwidth_bytes_per_s=cal.pcie_bandwidth_bytes_per_s,
        device_copy_bytes_per_s=cal.effective_bandwidth_bytes_per_s, kernel_launch_s=cal.kernel_launch_s,
        fitted=build_fitted_step(model, cal, kv_dtype, weight_dtype_bytes, quant_group_size=quant_group_size)
        if "gemm" in cal.kernels else None,
    )


def step_time_s(cm: CostModel, *, num_seqs: int, num_prefill_tokens: int, num_decode_tokens: int,
                decode_kv_tokens: int, prefill_attn_pairs: float, prefill_kv_tokens: int,
                num_prefill_seqs: int = 1, idle_before_s: float = 0.0) -> float:
    """Seconds one engine step takes; 0.0 when it has no tokens.

    num_seqs: sequences that produce a token this step (lm_head rows).
    num_prefill_tokens / num_decode_tokens: tokens computed, summed over sequences.
    decode_kv_tokens: sum over decoding sequences of the KV tokens each attends to.
    prefill_attn_pairs: sum over prefill chunks of q x (cached + (q + 1) / 2), where q is
        the chunk's tokens and cached the KV tokens already there (causal attention).
    prefill_kv_tokens: sum over prefill chunks of cached + q (KV tokens read).
    num_prefill_seqs: prefill chunks in the step (a fitted attention's per-sequence cost).
    idle_before_s: how long the engine sat idle before the step (a measured composition's
        after-idle factor; sim/composition.py).
    All arguments are non-negative; the result is non-decreasing in each but
    ``idle_before_s`` (a measured after-idle factor may be below 1).
    """
    if cm.fitted is not None:
        return fitted_step_time_s(cm.fitted, num_seqs=num_seqs, num_prefill_tokens=num_prefill_tokens,
                                  num_decode_tokens=num_decode_tokens, decode_kv_tokens=decode_kv_tokens,
                                  prefill_attn_pairs=prefill_attn_pairs, prefill_kv_tokens=prefill_kv_tokens,
                                  num_prefill_seqs=num_prefill_seqs, idle_before_s=idle_before_s)
    m = num_prefill_tokens + num_decode_tokens
    if m <= 0:
        return 0.0
    m_half = cm.m_half_tokens
    t = cm.fixed_step_s + m * cm.elementwise_s_per_token
    for weight_s, flop_s, launch_s in cm.dense_ops:
        compute_s = flop_s * (m + m_half)
        t += (weight_s if weight_s > compute_s else compute_s) + launch_s
    for weight_s, flop_s, launch_s, num_experts, top_k in cm.expert_ops:
        touched = num_experts * (1.0 - (1.0 - top_k / num_experts) ** m)
        read_s = weight_s * touched
        compute_s = flop_s * (m * top_k + touched * m_half)
        t += (read_s if read_s > compute_s else compute_s) + launch_s
    if num_seqs > 0:
        weight_s, flop_s, launch_s = cm.lm_head
        compute_s = flop_s * (num_seqs + m_half)
        t += (weight_s if weight_s > compute_s else compute_s) + launch_s
    t += (decode_kv_tokens + prefill_kv_tokens) * cm.kv_read_s_per_token
    return t + prefill_attn_pairs * cm.attn_s_per_pair


def prefill_time_s(cm: CostModel, num_prompt_tokens: int, *, num_cached_tokens: int = 0) -> float:
    """One request's prefill alone, in one step (no chunking), after ``num_cached_tokens`` hits."""
    q = num_prompt_tokens - num_cached_tokens
    if q <= 0:
        return 0.0
    return step_time_s(cm, num_seqs=1, num_prefill_tokens=q, num_decode_tokens=0, decode_kv_tokens=0,
                       prefill_attn_pairs=q * (num_cached_tokens + (q + 1) / 2),
                       prefill_kv_tokens=num_cached_tokens + q)


def decode_step_time_s(cm: CostModel, *, batch_size: int, context_tokens: int) -> float:
    """A pure decode step of ``batch_size`` sequences, each attending to ``context_tokens``."""
    return step_time_s(cm, num_seqs=batch_size, num_prefill_tokens=0, num_decode_tokens=batch_size,
                       decode_kv_tokens=batch_size * context_tokens, prefill_attn_pairs=0,
                       prefill_kv_tokens=0)


#: One host<->device copy's fixed cost (a cudaMemcpyAsync's launch and DMA setup) where
#: the calibration has no measured copy overhead. Engines swap KV block by block, per
#: layer, for K and V: small blocks mean many copies (the PagedAttention paper's Fig. 19).
PCIE_COPY_LATENCY_S = 10e-6


def staging_time_s(cm: CostModel, num_bytes: float, num_launches: int = 1) -> float:
    """Seconds to pack (or unpack) ``num_bytes`` of KV blocks on the device, in
    ``num_launches`` gather/scatter kernels: a device-to-device copy of those bytes."""
    if num_bytes <= 0:
        return 0.0
    launches = max(1, num_launches)
    if cm.fitted is not None:
        return launches * cm.fitted.cal.predict("copy_d2d", num_bytes=num_bytes / launches)
    return 2.0 * num_bytes / cm.device_copy_bytes_per_s + launches * cm.kernel_launch_s


def swap_time_s(cm: CostModel, num_bytes: float, num_copies: int = 1) -> float:
    """Seconds to copy ``num_bytes`` between host (pinned) and GPU memory over PCIe, in
    ``num_copies`` separate copies of equal size."""
    if num_bytes <= 0:
        return 0.0
    copies = max(1, num_copies)
    if cm.fitted is not None:
        return copies * fitted_swap_time_s(cm.fitted.cal, num_bytes / copies)
    return num_bytes / cm.pcie_bandwidth_bytes_per_s + copies * PCIE_COPY_LATENCY_S

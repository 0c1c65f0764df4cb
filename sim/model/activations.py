"""The activation peak of vLLM's startup profile run: what a forward pass of
``max_num_batched_tokens`` tokens and the sampler over ``max_num_seqs`` rows leave allocated at
their widest moment (sim/model/memory.py subtracts it from the KV pool's budget).
"""

from __future__ import annotations

import math

from sim.model.spec import MlpKind, ModelSpec, linear_ops

#: Bytes per logit (``max_num_seqs`` x vocab_size of them) alive at the sampler's peak in
#: vLLM's profile run, which samples with top-k and top-p (top_k = vocab - 1, top_p < 1) by
#: sorting: fp32 logits (4), sorted values (4) and their int64 indices (8), softmax of the
#: sorted values (4), its cumulative sum (4), the int64 inverse permutation (8), the logits
#: gathered back (4) and two boolean masks (2) = 38. Counted from vLLM's
#: ``_apply_top_k_top_p``; checked against a log where the sampler is the peak (vllm-project/vllm
#: PR #10511: Llama-3-8B, 8192 tokens, 256 sequences, activation peak 1.26 GiB; this
#: estimate 1.22 GiB).
SAMPLER_BYTES_PER_LOGIT = 38

#: Engine profiles (``engine.profile``) whose pool is sized by vLLM's profile run; None (no
#: profile given, e.g. ``sim kv``) is the default profile, vllm-v1.
VLLM_PROFILES = frozenset({"vllm-v0", "vllm-v1"})
#: TensorRT-LLM's engines, both backends: the runtime buffers and decoder below (the PyTorch backend's
#: own sampler buffers are not separately measured: taken as the TensorRT engine's)
TRTLLM_PROFILES = frozenset({"trtllm", "trtllm-pytorch"})

#: Other engines (trtllm, sglang, eager) keep kvsim's earlier, unvalidated estimate: two fp32
#: copies of the logits added to the forward pass's peak (2 hidden vectors a token), and
#: LEGACY_RUNTIME_OVERHEAD_BYTES (the 0.5-1 GiB of CUDA context, workspaces and NCCL buffers
#: seen on recent drivers). TensorRT-LLM's runtime overhead and its KV rule are checked against a
#: startup log in the published suite (trtllm-llava-1.5-7b-h100nvl-tp2-kv-gib); the others' are not.
LEGACY_SAMPLER_BYTES_PER_LOGIT = 8
LEGACY_FORWARD_HIDDEN_VECTORS = 2
LEGACY_RUNTIME_OVERHEAD_BYTES = 768 << 20
#: TensorRT-LLM's runtime buffers and decoder, per max_batch_size slot and vocabulary entry: what its
#: startup log prints before sizing the KV cache ("Allocated X GB GPU memory for runtime buffers",
#: "... for decoder"), about seven fp32 vocabulary-wide buffers a slot (logits, probabilities, sampling
#: workspaces). Two logs print both lines: TensorRT-LLM's perf-benchmarking doc (0.12, max_batch_size
#: 4,096: 1.14 + 4.35 GB; its KV bytes a token fit a 28-layer, 4096-wide model, GPT-J's 50,400-entry
#: vocabulary: 28.6 B) and NVIDIA/TensorRT-LLM issue #1188 (Qwen2.5-Coder-0.5B, vocabulary 151,936, the
#: build's default max_batch_size 2,048 (BuildConfig): 2.66 + 5.76 GB: 29.0 B; the logs' GB are GiB). A 0.19
#: log without those lines (issue #4275, Llama-3.1-8B FP8 on an RTX 5090, max_batch_size 2,048) leaves about
#: 19 B for them once kvsim's weight estimate and 0.75 GiB of other overhead are taken out.
#: trtllm-bench caps max_batch_size at 4,096 "to avoid decoder buffer size becoming too large"
#: (tensorrt_llm/bench/build/tuning.py). 29: the two logs' mean, rounded. Replaces the legacy two fp32 logit copies
#: for the trtllm profile.
TRTLLM_DECODER_BYTES_PER_LOGIT = 29

#: Hidden-state vectors (of ``hidden_size``) per token alive at the forward pass's widest
#: moment besides that moment's own tensors: the residual stream, the layer's (normed) input
#: and the output the moment is computing into (the down projection's, while gate/up and the
#: activated intermediate are still referenced). A fit: the activation peaks vLLM logged
#: for the same model and GPU at two profile sizes (vllm-project/vllm #10517: Llama-3.1-8B,
#: 2.07 GiB at 20,000 tokens, 2.99 GiB at 29,000) grow by 109.8 KB a token; 3 x 4096 +
#: 3 x 14,336 bf16 elements are 110.6 KB (2 x 4096 would be 102.4 KB).
FORWARD_HIDDEN_VECTORS = 3


def estimate_activation_peak_bytes(model: ModelSpec, *, max_num_batched_tokens: int,
                                  max_num_seqs: int, dtype_bytes: float = 2,
                                  sampler_vocab_size: int | None = None,
                                  engine_profile: str | None = None) -> int:
    """Estimate of the activation peak vLLM's profiling run measures, in bytes.

    The run is a forward pass over ``max_num_batched_tokens`` tokens, then the sampler over
    ``max_num_seqs`` rows of logits; the peak is the larger of the two moments (the forward
    pass's activations are freed before the sampler runs: the logged peaks of two profile
    sizes differ by the forward pass's growth alone, vllm-project/vllm #10517).

    Forward, per token in the weight dtype: FORWARD_HIDDEN_VECTORS x hidden_size plus the
    widest moment inside a layer, whichever is larger of
      attention: q, k, v (or MLA's projections) and the attention output;
      MLP: gate+up output and the activated intermediate (3 x intermediate_size; OPT's
      fc1 output and activation, 2 x ffn_dim); MoE layers: that for each of the top-k
      routed experts and for the shared experts, plus the router logits.
    Sampler: ``max_num_seqs`` x vocab_size x SAMPLER_BYTES_PER_LOGIT (``sampler_vocab_size``,
    default the model's: a tensor-parallel GPU's share of the model samples over the whole,
    gathered vocabulary; 0 on a pipeline stage without the lm_head), plus the final hidden
    states it is computed from (tokens x hidden_size). An estimate: the true peak depends
    on kernels and fusion. ``engine_profile`` outside VLLM_PROFILES: the legacy estimate
    (forward with LEGACY_FORWARD_HIDDEN_VECTORS plus LEGACY_SAMPLER_BYTES_PER_LOGIT logits; trtllm:
    TRTLLM_DECODER_BYTES_PER_LOGIT, its runtime buffers and decoder for ``max_num_seqs`` slots).
    """
    vllm = engine_profile is None or engine_profile in VLLM_PROFILES
    ops = {op.name: op for op in linear_ops(model)}
    attn = sum(ops[n].n for n in ("qkv", "q", "q_b", "kv_a", "kv_b") if n in ops)
    attn += model.num_attention_heads * (model.v_head_dim or model.head_dim)
    mlp_factor = 3 if model.mlp is MlpKind.GATED else 2
    mlp = mlp_factor * model.intermediate_size if model.num_dense_mlp_layers else 0
    if model.is_moe:
        moe = 3 * model.moe_intermediate_size * (model.num_experts_per_tok + model.num_shared_experts)
        mlp = max(mlp, moe + model.num_experts)
    vectors = FORWARD_HIDDEN_VECTORS if vllm else LEGACY_FORWARD_HIDDEN_VECTORS
    per_token = vectors * model.hidden_size + max(attn, mlp)
    forward = math.ceil(max_num_batched_tokens * per_token * dtype_bytes)
    vocab = model.vocab_size if sampler_vocab_size is None else sampler_vocab_size
    if not vllm:
        per_logit = TRTLLM_DECODER_BYTES_PER_LOGIT if engine_profile in TRTLLM_PROFILES else LEGACY_SAMPLER_BYTES_PER_LOGIT
        return forward + max_num_seqs * vocab * per_logit
    if vocab == 0:  # no sampler on this GPU
        return forward
    sampler = max_num_seqs * vocab * SAMPLER_BYTES_PER_LOGIT
    sampler += math.ceil(max_num_batched_tokens * model.hidden_size * dtype_bytes)
    return max(forward, sampler)


__all__ = ["FORWARD_HIDDEN_VECTORS", "LEGACY_FORWARD_HIDDEN_VECTORS", "LEGACY_RUNTIME_OVERHEAD_BYTES",
           "LEGACY_SAMPLER_BYTES_PER_LOGIT", "SAMPLER_BYTES_PER_LOGIT", "TRTLLM_DECODER_BYTES_PER_LOGIT", "TRTLLM_PROFILES",
           "VLLM_PROFILES", "estimate_activation_peak_bytes"]

"""KV pool sizing the way vLLM does it at startup.

vLLM loads the weights, runs one profiling forward pass of ``max_num_batched_tokens``
tokens (plus a sampler pass over ``max_num_seqs`` rows), and gives the KV cache whatever
is left of ``gpu_memory_utilization`` x total memory::

    kv_pool_bytes   = gpu_memory_bytes x gpu_memory_utilization
                      - weight_bytes - activation_peak_bytes - runtime_overhead_bytes
    bytes_per_block = ceil(bytes_per_token x block_size)
    num_gpu_blocks  = floor(kv_pool_bytes / bytes_per_block)

If the pool is empty vLLM refuses to start (``plan_memory`` raises ConfigError). If it
cannot hold one ``max_model_len`` sequence vLLM refuses too; that check is separate
(``check_fits_one_sequence``) so a simulator can choose to run anyway.

With tensor parallelism (``tensor_parallel_size`` = tp > 1) every term is per GPU, as each
vLLM worker profiles its own GPU: the weights and bytes per token are those of one GPU's
share of the model (sim/model/parallel.py ``shard_model``), the activation peak is the
sharded layers' plus the sampler over the whole vocabulary (the logits are gathered), and
the pool's blocks are the same on every GPU: a token's KV is spread over the tp GPUs, so
the replica holds ``num_gpu_blocks x block_size`` tokens.

With pipeline parallelism (``pipeline_parallel_size`` = pp > 1, sim/model/parallel.py) each
stage's GPUs hold that stage's layers (the first stage the embedding, the last the lm_head)
and those layers' KV: a stage's plan is the one above on its layers' spec, its activation
peak its layers' (the sampler only on the last stage, which computes the logits). Every
stage holds its layers of every token, so the replica's blocks are the fewest any stage has
room for: vLLM takes the minimum over its workers (``get_kv_cache_configs`` in
vllm/v1/core/kv_cache_utils.py: "Change the num_blocks of each rank to the smallest among
all ranks"). The plan returned is that (binding) stage's, with every stage's in ``stages``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.model.parallel import (
    check_pipeline_parallel, check_tensor_parallel, shard_model, stage_models, stage_weight_bytes)
from sim.model.spec import KVDtype, MlpKind, ModelSpec, kv_bytes_per_token, linear_ops, max_kv_tokens_per_seq
from sim.model.weights import weight_bytes

GIB = 1 << 30

#: Memory outside PyTorch's allocator that vLLM subtracts besides the weights and the
#: activation peak (its logged ``non_torch_memory``: cuBLAS/cuBLASLt workspaces, NCCL, what
#: the profile run left outside the allocator), per GPU. A fit over startup logs: the median
#: of the ``non_torch_memory`` one-GPU vLLM logs print, 0.03, 0.10, 0.16, 0.35 and 1.79 GiB
#: (vllm-project/vllm #13882, #12330, PR #12126, #10517, PR #10511), i.e. 0.16 GiB.
DEFAULT_RUNTIME_OVERHEAD_BYTES = 164 << 20

#: With tensor parallelism each GPU holds more non-torch memory: NCCL's channel buffers and
#: vLLM's custom all-reduce buffers. A fit: the median of the ``non_torch_memory`` that
#: tensor-parallel vLLM logs print, 0.20, 0.59, 0.60, 0.72 and 3.58 GiB (PR #14447, the
#: gfx906 fork's #10 (two logs), PR #48601, PR #10511), 0.60 GiB, less the one-GPU median.
TP_RUNTIME_OVERHEAD_BYTES = (614 << 20) - DEFAULT_RUNTIME_OVERHEAD_BYTES

#: Most KV blocks a pool may have (16,777,216): the paged allocator keeps a few Python objects
#: per block (4M blocks take about 0.6 GB and 3 s to set up; tiny-llama on an A100-80GB
#: makes 4.4M); a bigger pool is a typo or a fake GPU.
MAX_GPU_BLOCKS = 1 << 24

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

#: Other engines (trtllm, sglang, eager) keep kvsim's earlier, unvalidated estimate: two fp32
#: copies of the logits added to the forward pass's peak (2 hidden vectors a token), and
#: LEGACY_RUNTIME_OVERHEAD_BYTES (the 0.5-1 GiB of CUDA context, workspaces and NCCL buffers
#: seen on recent drivers). No startup log of theirs is in the published suite.
LEGACY_SAMPLER_BYTES_PER_LOGIT = 8
LEGACY_FORWARD_HIDDEN_VECTORS = 2
LEGACY_RUNTIME_OVERHEAD_BYTES = 768 << 20

#: Hidden-state vectors (of ``hidden_size``) per token alive at the forward pass's widest
#: moment besides that moment's own tensors: the residual stream, the layer's (normed) input
#: and the output the moment is computing into (the down projection's, while gate/up and the
#: activated intermediate are still referenced). A fit: the activation peaks vLLM logged
#: for the same model and GPU at two profile sizes (vllm-project/vllm #10517: Llama-3.1-8B,
#: 2.07 GiB at 20,000 tokens, 2.99 GiB at 29,000) grow by 109.8 KB a token; 3 x 4096 +
#: 3 x 14,336 bf16 elements are 110.6 KB (2 x 4096 would be 102.4 KB).
FORWARD_HIDDEN_VECTORS = 3


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage's plan of one of its GPUs (sizes in bytes)."""

    layers: int
    weight_bytes: int
    activation_peak_bytes: int
    kv_pool_bytes: int
    bytes_per_token: int | float
    num_gpu_blocks: int  # what this stage alone has room for


@dataclass(frozen=True)
class MemoryPlan:
    """The outcome of vLLM's startup memory profiling. Sizes in bytes."""

    gpu_memory_bytes: int
    gpu_memory_utilization: float
    weight_bytes: int
    activation_peak_bytes: int
    runtime_overhead_bytes: int
    kv_pool_bytes: int  # budget left for the KV cache (may exceed num_gpu_blocks x bytes_per_block)
    kv_dtype: KVDtype
    bytes_per_token: int | float
    block_size: int
    bytes_per_block: int
    num_gpu_blocks: int
    max_model_len: int
    max_kv_tokens_per_seq: int  # min(max_model_len, sliding_window)
    tensor_parallel_size: int = 1  # GPUs of the replica; every size above is per GPU
    pipeline_parallel_size: int = 1  # stages; the sizes above are the binding stage's GPU's
    stages: tuple[StagePlan, ...] = ()  # pp > 1: every stage's plan of one of its GPUs, first to last

    @property
    def pool_tokens(self) -> int:
        """KV tokens the pool holds: num_gpu_blocks x block_size."""
        return self.num_gpu_blocks * self.block_size

    @property
    def blocks_per_full_seq(self) -> int:
        """Blocks one sequence needs at its longest (max_kv_tokens_per_seq tokens)."""
        return math.ceil(self.max_kv_tokens_per_seq / self.block_size)

    @property
    def max_full_length_seqs(self) -> int:
        """Sequences that fit at once if each grows to its longest (whole blocks each)."""
        return self.num_gpu_blocks // self.blocks_per_full_seq

    @property
    def max_concurrency(self) -> float:
        """vLLM's logged 'Maximum concurrency': pool_tokens / max_kv_tokens_per_seq."""
        return self.pool_tokens / self.max_kv_tokens_per_seq


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
    (forward with LEGACY_FORWARD_HIDDEN_VECTORS plus LEGACY_SAMPLER_BYTES_PER_LOGIT logits).
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
        return forward + max_num_seqs * vocab * LEGACY_SAMPLER_BYTES_PER_LOGIT
    if vocab == 0:  # no sampler on this GPU
        return forward
    sampler = max_num_seqs * vocab * SAMPLER_BYTES_PER_LOGIT
    sampler += math.ceil(max_num_batched_tokens * model.hidden_size * dtype_bytes)
    return max(forward, sampler)


def default_runtime_overhead_bytes(tensor_parallel_size: int = 1, engine_profile: str | None = None) -> int:
    """Non-torch memory per GPU vLLM subtracts: DEFAULT_RUNTIME_OVERHEAD_BYTES, plus
    TP_RUNTIME_OVERHEAD_BYTES (collective buffers) when the replica is tensor parallel;
    LEGACY_RUNTIME_OVERHEAD_BYTES for an ``engine_profile`` outside VLLM_PROFILES."""
    if engine_profile is not None and engine_profile not in VLLM_PROFILES:
        return LEGACY_RUNTIME_OVERHEAD_BYTES
    return DEFAULT_RUNTIME_OVERHEAD_BYTES + (TP_RUNTIME_OVERHEAD_BYTES if tensor_parallel_size > 1 else 0)


def _gib(x: float) -> str:
    """Bytes for a message: GiB with two decimals, MiB below 0.01 GiB (a tiny model's blocks)."""
    if abs(x) < 0.01 * GIB:
        return f"{x / 2**20:.2f} MiB"
    return f"{x / GIB:.2f} GiB"


def plan_memory(model: ModelSpec, gpu_memory_bytes: int, *, gpu_memory_utilization: float = 0.9,
                block_size: int = 16, kv_dtype: KVDtype | str = KVDtype.BF16,
                weight_dtype_bytes: float = 2, max_num_batched_tokens: int = 8192,
                max_num_seqs: int = 256, max_model_len: int,
                activation_peak_bytes: int | None = None, runtime_overhead_bytes: int | None = None,
                quant_group_size: int = 64, num_gpu_blocks_override: int | None = None,
                tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                engine_profile: str | None = None, embedding_bytes: float | None = None,
                source: str = "<cli>") -> MemoryPlan:
    """Size the KV pool; raise ConfigError(source, key, ...) for bad arguments or no room.

    ``activation_peak_bytes`` / ``runtime_overhead_bytes`` default to this module's
    estimates (``estimate_activation_peak_bytes``, ``default_runtime_overhead_bytes``). ``num_gpu_blocks_override`` replaces the computed block count (vLLM's option
    of that name) but the pool must still be positive. ``tensor_parallel_size``: the plan of one
    GPU of a tensor-parallel replica; ``pipeline_parallel_size``: of the binding stage of a
    pipeline-parallel one (module docstring). ``engine_profile``: the scenario's
    ``engine.profile`` (a string; None: the default, vllm-v1), which picks the estimates.
    ``embedding_bytes``: bytes per parameter of the embedding table and lm_head (None: 16-bit under quantized weights,
    sim.model.weights).
    """
    profile = None if engine_profile is None else str(getattr(engine_profile, "value", engine_profile))
    _require(0 < gpu_memory_utilization <= 1, source, "gpu_memory_utilization",
             f"must be in (0, 1], got {gpu_memory_utilization}")
    for key, value in (("gpu_memory_bytes", gpu_memory_bytes), ("block_size", block_size),
                       ("max_num_batched_tokens", max_num_batched_tokens),
                       ("max_num_seqs", max_num_seqs), ("max_model_len", max_model_len),
                       ("quant_group_size", quant_group_size), ("weight_dtype_bytes", weight_dtype_bytes)):
        _require(value > 0, source, key, f"must be positive, got {value}")
    if num_gpu_blocks_override is not None:
        _require(num_gpu_blocks_override > 0, source, "num_gpu_blocks_override",
                 f"must be positive, got {num_gpu_blocks_override}")
    try:
        dtype = KVDtype(kv_dtype)
    except ValueError:
        raise ConfigError(source, "kv_dtype", f"got {kv_dtype!r}; allowed: "
                          f"{', '.join(d.value for d in KVDtype)}") from None
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    check_tensor_parallel(model, tp, source, "tensor_parallel_size")
    check_pipeline_parallel(model, pp, source, "pipeline_parallel_size")
    if runtime_overhead_bytes is None:
        runtime_overhead_bytes = default_runtime_overhead_bytes(tp, profile)
    budget = gpu_memory_bytes * gpu_memory_utilization
    stages = []  # (stage plan, bytes per block) of every stage, first to last
    for index, layers in enumerate(stage_models(model, pp)):  # (model,) when pp == 1
        shard = shard_model(layers, tp)  # the stage itself when tp == 1
        weights = (weight_bytes(shard, weight_dtype_bytes, embedding_bytes) if pp == 1
                   else stage_weight_bytes(shard, index, pp, weight_dtype_bytes, embedding_bytes))
        act = activation_peak_bytes
        if act is None:  # the sampler's logits: on the last stage only
            act = estimate_activation_peak_bytes(
                shard, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                dtype_bytes=weight_dtype_bytes, sampler_vocab_size=model.vocab_size if index == pp - 1 else 0,
                engine_profile=profile)
        pool = math.floor(budget - weights - act - runtime_overhead_bytes)
        per_token = kv_bytes_per_token(shard, dtype, quant_group_size=quant_group_size)
        per_block = math.ceil(per_token * block_size)
        blocks = max(0, pool) // per_block
        stages.append((StagePlan(layers.num_layers, weights, act, pool, per_token, blocks), per_block))
    binding, per_block = min(stages, key=lambda s: s[0].num_gpu_blocks)  # the first of the fewest
    weights, activation_peak_bytes, pool = binding.weight_bytes, binding.activation_peak_bytes, binding.kv_pool_bytes
    per_token = binding.bytes_per_token
    if pool <= 0 or (num_gpu_blocks_override is None and pool < per_block):
        per_gpu = f", 1/{tp} of it per GPU" if tp > 1 else ""
        if pp > 1:
            per_gpu += f", pipeline stage {stages.index((binding, per_block))} of {pp}: {binding.layers} layers"
        raise ConfigError(source, "gpu_memory_utilization", (
            f"no memory left for the KV cache: {gpu_memory_utilization} x {_gib(gpu_memory_bytes)}"
            f" = {_gib(budget)}, minus weights {_gib(weights)} ({model.name}{per_gpu}), activations"
            f" {_gib(activation_peak_bytes)}, runtime overhead {_gib(runtime_overhead_bytes)}"
            f" leaves {_gib(pool)}; use a bigger GPU, a smaller model, more GPUs (tensor_parallel_size"
            f" or pipeline_parallel_size) or lower max_num_batched_tokens, or raise gpu_memory_utilization"))
    num_blocks = num_gpu_blocks_override or pool // per_block
    if num_blocks > MAX_GPU_BLOCKS:
        key = "num_gpu_blocks_override" if num_gpu_blocks_override else "block_size"
        raise ConfigError(source, key, (
            f"a KV pool of {num_blocks} blocks; the most is {MAX_GPU_BLOCKS} (the allocator keeps"
            f" objects per block): raise the block size (now {block_size}), lower"
            " gpu_memory_utilization or set num_gpu_blocks_override"))
    return MemoryPlan(
        gpu_memory_bytes=gpu_memory_bytes, gpu_memory_utilization=gpu_memory_utilization,
        weight_bytes=weights, activation_peak_bytes=activation_peak_bytes,
        runtime_overhead_bytes=runtime_overhead_bytes, kv_pool_bytes=pool, kv_dtype=dtype,
        bytes_per_token=per_token, block_size=block_size, bytes_per_block=per_block,
        num_gpu_blocks=num_blocks, max_model_len=max_model_len,
        max_kv_tokens_per_seq=max_kv_tokens_per_seq(model, max_model_len), tensor_parallel_size=tp,
        pipeline_parallel_size=pp, stages=tuple(st for st, _ in stages) if pp > 1 else ())


def check_fits_one_sequence(plan: MemoryPlan, max_model_len: int, source: str = "<cli>") -> None:
    """Raise ConfigError(source, "max_model_len", ...) unless one longest sequence fits.

    A sequence needs ceil(min(max_model_len, sliding_window) / block_size) blocks; vLLM
    refuses to start when the pool has fewer.
    """
    tokens = max_model_len
    if plan.max_kv_tokens_per_seq < plan.max_model_len:  # sliding window: the plan knows it
        tokens = min(max_model_len, plan.max_kv_tokens_per_seq)
    needed = math.ceil(tokens / plan.block_size)
    if needed > plan.num_gpu_blocks:
        raise ConfigError(source, "max_model_len", (
            f"one sequence of {max_model_len} tokens needs {needed} KV blocks"
            f" ({_gib(needed * plan.bytes_per_block)}) but the pool has {plan.num_gpu_blocks}"
            f" ({_gib(plan.num_gpu_blocks * plan.bytes_per_block)}); set max_model_len <= {plan.pool_tokens}"
            f" or free memory (gpu_memory_utilization, a smaller model or KV dtype)"))


def _require(ok: bool, source: str, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(source, key, message)

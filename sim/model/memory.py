"""KV pool sizing the way vLLM does it at startup.

vLLM loads the weights, runs one profiling forward pass of ``max_num_batched_tokens``
tokens (plus a sampler pass over ``max_num_seqs`` rows), and gives the KV cache whatever
is left of ``gpu_memory_utilization`` x total memory::

    kv_pool_bytes   = gpu_memory_bytes x gpu_memory_utilization
                      - weight_bytes - activation_peak_bytes - runtime_overhead_bytes
    bytes_per_block = ceil(bytes_per_token x block_size)
    num_gpu_blocks  = floor(kv_pool_bytes / bytes_per_block)

TensorRT-LLM sizes it differently: ``kv_cache_free_gpu_mem_fraction`` (its KvCacheConfig's
``free_gpu_memory_fraction``, default 0.9) of the memory still free once the weights are loaded
and the activations reserved, ``kv_pool_bytes = fraction x (gpu_memory_bytes - weight_bytes -
activation_peak_bytes - runtime_overhead_bytes)``: on a GPU the weights nearly fill it gives
the KV cache far more than a share of the total would.

What vLLM counts outside PyTorch (``memory_accounting``) changed in 0.6.5 (PR #10511): since then
only what the profile run adds (``increase``, the default, DEFAULT_RUNTIME_OVERHEAD_BYTES);
before, all the memory in use on the GPU besides PyTorch's tensors, the process's own CUDA
context included (``total-used``, TOTAL_USED_RUNTIME_OVERHEAD_BYTES): 0.2.5 to 0.6.3 took the
peak as total minus free memory after the profile run (PR #2031), 0.6.4 added the non-torch
memory measured the same way to the PyTorch peak (it logs ``non_torch_memory``).

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

With attention data parallelism (``attention_data_parallel``, SGLang's --enable-dp-attention,
TensorRT-LLM's enable_attention_dp, vLLM's data-parallel attention beside expert parallelism) the
tp GPUs each run all the attention heads for requests of their own, while the MLP, the experts
and the vocabulary stay split over them: a GPU holds the full attention weights, 1/tp of the
rest, and whole tokens of its own requests' KV (an MLA latent once, not on every GPU). Its pool
is sized as above on that share; the engine's blocks are the tp GPUs' together, and one
sequence must fit one GPU's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import ConfigError
from sim.model.parallel import (
    check_pipeline_parallel, check_tensor_parallel, shard_model, stage_models, stage_weight_bytes)
from sim.model.spec import KVDtype, ModelSpec, kv_bytes_per_token, max_kv_tokens_per_seq
from sim.model.activations import (  # noqa: F401 (re-exported: the activation estimate lived here)
    FORWARD_HIDDEN_VECTORS, LEGACY_FORWARD_HIDDEN_VECTORS, LEGACY_RUNTIME_OVERHEAD_BYTES,
    LEGACY_SAMPLER_BYTES_PER_LOGIT, SAMPLER_BYTES_PER_LOGIT, VLLM_PROFILES, estimate_activation_peak_bytes)
from sim.model.weights import weight_bytes

GIB = 1 << 30

#: Memory outside PyTorch's allocator that vLLM subtracts besides the weights and the
#: activation peak (its logged ``non_torch_memory``: cuBLAS/cuBLASLt workspaces, NCCL, what
#: the profile run left outside the allocator), per GPU. A fit over startup logs: the median
#: of the ``non_torch_memory`` one-GPU vLLM logs print, 0.03, 0.10, 0.16, 0.35 and 1.79 GiB
#: (vllm-project/vllm #13882, #12330, PR #12126, #10517, PR #10511), i.e. 0.16 GiB.
DEFAULT_RUNTIME_OVERHEAD_BYTES = 164 << 20

#: The same memory as vLLM 0.6.4 and earlier count it (``memory_accounting: total-used``), per GPU:
#: everything in use outside PyTorch's allocations once the profile run is over, the CUDA context
#: and library workspaces made before it included. A fit on the train side: the one log of that
#: accounting that prints the term, vllm-project/vllm #10517 (vLLM 0.6.4, RTX 3090, Llama-3.1-8B,
#: the 29k run: ``non_torch_memory=0.35GiB``, ``initial_memory_usage`` 15.34 GiB over 14.99 of weights).
TOTAL_USED_RUNTIME_OVERHEAD_BYTES = 358 << 20

#: The accountings vLLM versions use (module docstring): ``increase`` (0.6.5 and later, V1) or
#: ``total-used`` (0.2.5 to 0.6.4).
MEMORY_ACCOUNTINGS = ("increase", "total-used")

#: With tensor parallelism each GPU holds more non-torch memory: NCCL's channel buffers and
#: vLLM's custom all-reduce buffers. A fit: the median of the ``non_torch_memory`` that
#: tensor-parallel vLLM logs print, 0.20, 0.59, 0.60, 0.72 and 3.58 GiB (PR #14447, the
#: gfx906 fork's #10 (two logs), PR #48601, PR #10511), 0.60 GiB, less the one-GPU median.
TP_RUNTIME_OVERHEAD_BYTES = (614 << 20) - DEFAULT_RUNTIME_OVERHEAD_BYTES

#: Most KV blocks a pool may have (16,777,216): the paged allocator keeps a few Python objects
#: per block (4M blocks take about 0.6 GB and 3 s to set up; tiny-llama on an A100-80GB
#: makes 4.4M); a bigger pool is a typo or a fake GPU.
MAX_GPU_BLOCKS = 1 << 24

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
    #: attention data-parallel ranks (engine.attention_data_parallel: the tp GPUs; else 1): each
    #: GPU holds its own requests' KV, so num_gpu_blocks counts every rank's blocks
    attention_ranks: int = 1
    #: TensorRT-LLM's rule (module docstring): the KV share of the memory left free; None: vLLM's
    kv_free_memory_fraction: float | None = None

    @property
    def pool_tokens(self) -> int:
        """KV tokens the pool holds: num_gpu_blocks x block_size."""
        return self.num_gpu_blocks * self.block_size

    @property
    def blocks_per_full_seq(self) -> int:
        """Blocks one sequence needs at its longest (max_kv_tokens_per_seq tokens)."""
        return math.ceil(self.max_kv_tokens_per_seq / self.block_size)

    @property
    def blocks_per_rank(self) -> int:
        """The blocks one sequence's GPU has: all of them, or one attention rank's share."""
        return self.num_gpu_blocks // self.attention_ranks

    @property
    def max_full_length_seqs(self) -> int:
        """Sequences that fit at once if each grows to its longest (whole blocks each, on one rank)."""
        return self.attention_ranks * (self.blocks_per_rank // self.blocks_per_full_seq)

    @property
    def max_concurrency(self) -> float:
        """vLLM's logged 'Maximum concurrency': pool_tokens / max_kv_tokens_per_seq."""
        return self.pool_tokens / self.max_kv_tokens_per_seq


def default_runtime_overhead_bytes(tensor_parallel_size: int = 1, engine_profile: str | None = None,
                                   memory_accounting: str = "increase") -> int:
    """Non-torch memory per GPU vLLM subtracts: DEFAULT_RUNTIME_OVERHEAD_BYTES
    (TOTAL_USED_RUNTIME_OVERHEAD_BYTES under ``memory_accounting`` total-used), plus
    TP_RUNTIME_OVERHEAD_BYTES (collective buffers) when the replica is tensor parallel;
    LEGACY_RUNTIME_OVERHEAD_BYTES for an ``engine_profile`` outside VLLM_PROFILES."""
    if engine_profile is not None and engine_profile not in VLLM_PROFILES:
        return LEGACY_RUNTIME_OVERHEAD_BYTES
    base = TOTAL_USED_RUNTIME_OVERHEAD_BYTES if memory_accounting == "total-used" else DEFAULT_RUNTIME_OVERHEAD_BYTES
    return base + (TP_RUNTIME_OVERHEAD_BYTES if tensor_parallel_size > 1 else 0)


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
                attention_data_parallel: bool = False, kv_free_memory_fraction: float | None = None,
                memory_accounting: str = "increase", source: str = "<cli>") -> MemoryPlan:
    """Size the KV pool; raise ConfigError(source, key, ...) for bad arguments or no room.

    ``activation_peak_bytes`` / ``runtime_overhead_bytes`` default to this module's
    estimates (``estimate_activation_peak_bytes``, ``default_runtime_overhead_bytes``). ``num_gpu_blocks_override`` replaces the computed block count (vLLM's option
    of that name) but the pool must still be positive. ``tensor_parallel_size``: the plan of one
    GPU of a tensor-parallel replica; ``pipeline_parallel_size``: of the binding stage of a
    pipeline-parallel one (module docstring). ``engine_profile``: the scenario's
    ``engine.profile`` (a string; None: the default, vllm-v1), which picks the estimates.
    ``embedding_bytes``: bytes per parameter of the embedding table and lm_head (None: 16-bit under quantized weights,
    sim.model.weights). ``attention_data_parallel``: the tp GPUs run attention data-parallel
    (module docstring). ``kv_free_memory_fraction``: TensorRT-LLM's rule, that share of the memory
    left free (module docstring; ``gpu_memory_utilization`` is then not used). ``memory_accounting``:
    what the vLLM version counts outside PyTorch, one of MEMORY_ACCOUNTINGS (module docstring).
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
    ranks = tp if attention_data_parallel else 1
    _require(ranks == 1 or (tp > 1 and pp == 1), source, "attention_data_parallel",
             f"needs tensor_parallel_size > 1 and no pipeline parallelism (got tp {tp}, pp {pp})")
    free_fraction = kv_free_memory_fraction
    _require(free_fraction is None or 0 < free_fraction <= 1, source, "kv_cache_free_gpu_mem_fraction",
             f"must be in (0, 1], got {free_fraction}")
    _require(memory_accounting in MEMORY_ACCOUNTINGS, source, "memory_accounting",
             f"got {memory_accounting!r}; allowed: {', '.join(MEMORY_ACCOUNTINGS)}")
    if runtime_overhead_bytes is None:
        runtime_overhead_bytes = default_runtime_overhead_bytes(tp, profile, memory_accounting)
    budget = gpu_memory_bytes * gpu_memory_utilization if free_fraction is None else gpu_memory_bytes
    stages = []  # (stage plan, bytes per block) of every stage, first to last
    for index, layers in enumerate(stage_models(model, pp)):  # (model,) when pp == 1
        shard = shard_model(layers, tp, ranks > 1)  # the stage itself when tp == 1
        weights = (weight_bytes(shard, weight_dtype_bytes, embedding_bytes) if pp == 1
                   else stage_weight_bytes(shard, index, pp, weight_dtype_bytes, embedding_bytes))
        act = activation_peak_bytes
        if act is None:  # the sampler's logits: on the last stage only
            act = estimate_activation_peak_bytes(
                shard, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                dtype_bytes=weight_dtype_bytes, sampler_vocab_size=model.vocab_size if index == pp - 1 else 0,
                engine_profile=profile)
        pool = math.floor(budget - weights - act - runtime_overhead_bytes)
        if free_fraction is not None and pool > 0:
            pool = math.floor(free_fraction * pool)
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
        share = (f"{gpu_memory_utilization} x {_gib(gpu_memory_bytes)} = {_gib(budget)}" if free_fraction is None
                 else f"{free_fraction} of what is free of {_gib(gpu_memory_bytes)}")
        raise ConfigError(source, "gpu_memory_utilization" if free_fraction is None else "kv_cache_free_gpu_mem_fraction", (
            f"no memory left for the KV cache: {share}, minus weights {_gib(weights)} ({model.name}{per_gpu}), activations"
            f" {_gib(activation_peak_bytes)}, runtime overhead {_gib(runtime_overhead_bytes)}"
            f" leaves {_gib(pool)}; use a bigger GPU, a smaller model, more GPUs (tensor_parallel_size"
            f" or pipeline_parallel_size) or lower max_num_batched_tokens"
            + (", or raise gpu_memory_utilization" if free_fraction is None else "")))
    num_blocks = num_gpu_blocks_override or ranks * (pool // per_block)
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
        pipeline_parallel_size=pp, stages=tuple(st for st, _ in stages) if pp > 1 else (), attention_ranks=ranks,
        kv_free_memory_fraction=free_fraction)


def check_fits_one_sequence(plan: MemoryPlan, max_model_len: int, source: str = "<cli>",
                            reserved_blocks: int = 0) -> None:
    """Raise ConfigError(source, "max_model_len", ...) unless one longest sequence fits.

    A sequence needs ceil(min(max_model_len, sliding_window) / block_size) blocks; vLLM
    refuses to start when the pool has fewer, not counting the ``reserved_blocks`` it keeps
    aside (vLLM V1's null block).
    """
    tokens = max_model_len
    if plan.max_kv_tokens_per_seq < plan.max_model_len:  # sliding window: the plan knows it
        tokens = min(max_model_len, plan.max_kv_tokens_per_seq)
    needed, have = math.ceil(tokens / plan.block_size), plan.blocks_per_rank - reserved_blocks
    if needed > have:
        pool = "the pool has" if plan.attention_ranks == 1 else "one attention rank's pool has"
        if reserved_blocks:
            pool = f"{pool} {reserved_blocks} kept aside (vLLM's null block) and"
        raise ConfigError(source, "max_model_len", (
            f"one sequence of {max_model_len} tokens needs {needed} KV blocks"
            f" ({_gib(needed * plan.bytes_per_block)}) but {pool} {have}"
            f" ({_gib(have * plan.bytes_per_block)}); set max_model_len <= {have * plan.block_size}"
            f" or free memory (gpu_memory_utilization, a smaller model or KV dtype)"))


def _require(ok: bool, source: str, key: str, message: str) -> None:
    if not ok:
        raise ConfigError(source, key, message)

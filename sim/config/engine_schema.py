"""The scenario's ``engine`` section: the profile, entrypoint, memory plan, dtypes and parallelism.
Re-exported by sim/config/schema.py; each key's description is its text on
docs/reference/scenario.md (generated from these models)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from sim.config.limits import FrozenModel as _Frozen, nonneg_int, pos_float, pos_int
from sim.config.profile_schema import PipelineMode, ProfileChoice, ProfileOverrides
from sim.cost.profile import DEFAULT_PROFILE, Entrypoint


def _choice(enum):
    """An enum field that accepts its string values (strict mode would demand the enum)."""
    return Annotated[enum, Field(strict=False)]


DtypeName = Literal["fp16", "bf16", "fp8", "int8", "int4"]
WeightDtypeName = Literal["fp16", "bf16", "fp8", "int8", "int4", "fp4"]  # fp4: NVFP4 weights
#: The math mode of the GEMMs (sim/calib/calibration.py ``compute_peaks``): bf16/fp16 with
#: fp32 accumulate, fp16 with fp16 accumulate (GeForce cards' faster mode), fp8, int8, fp4.
ComputeDtypeName = Literal["bf16", "fp16", "fp16-acc16", "fp8", "int8", "fp4"]


class EngineConfig(_Frozen):
    """The engine: its profile, entrypoint, memory plan, dtypes and parallelism."""

    profile: ProfileChoice = Field(  # sim/cost/profile.py
        DEFAULT_PROFILE,
        description="How the engine spends each step around its kernels (graphs, host time, front end) and its "
                    "batching defaults ([engine profiles](../concepts/engine-profiles.md)).")
    profile_overrides: ProfileOverrides = Field(
        ProfileOverrides(),
        description="Replace numbers of the profile for this scenario (below); they win over the calibration's "
                    "`profiles:` numbers.")
    entrypoint: _choice(Entrypoint) = Field(  # offline: no HTTP front end (sim/cost/profile.py)
        Entrypoint.API_SERVER,
        description="How requests reach the engine. `api-server`: an HTTP server streaming to its clients, as "
                    "`vllm serve` under `vllm bench serve`: the profile's front end tokenises and streams, and "
                    "latencies are the client's. `offline`: the engine's own API in process (vLLM's "
                    "`LLM.generate` and `benchmark_throughput.py`, `sgl.Engine`, `trtllm-bench`): no front end; "
                    "vLLM V0's inline output processing stays, it runs in the engine loop. `chat`: an `api-server` "
                    "whose clients call its chat route (`/v1/chat/completions`, `vllm bench serve --backend "
                    "openai-chat`): each request also waits the profile's `frontend_chat_request_s` before the "
                    "engine sees it.")
    api_servers: pos_int("engine.api_servers") = Field(  # sim/engine/step/frontend.py
        1,
        description="Front-end processes of an `api-server` or `chat` entrypoint (vLLM's `--api-server-count`): a new "
                    "request goes to the one free first, a step's streaming is spread over all of them. One "
                    "streams at most 1 / `frontend_token_s` tokens a second (12,500 with `vllm-v1`'s 80 us): "
                    "raise it where a busy engine outruns one. An `offline` entrypoint keeps 1.")
    max_model_len: pos_int("engine.max_model_len") = Field(
        8192, description="Longest sequence (prompt + output), in tokens.")
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        0.9, description="Share of GPU memory the engine may use (vLLM's KV sizing: the KV pool is what this "
                         "share leaves after the weights, activations and runtime overhead).")
    kv_cache_free_gpu_mem_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = Field(
        None,  # sim/model/memory.py
        description="TensorRT-LLM's (and LMDeploy's) KV sizing instead of vLLM's: the KV cache takes this share of the memory "
                    "left free after the weights, activations and runtime (TensorRT-LLM's "
                    "`kv_cache_free_gpu_mem_fraction`, default there 0.9; LMDeploy's `cache_max_entry_count`, 0.8, "
                    "the `lmdeploy` profile's default; `gpu_memory_utilization` is then not "
                    "used). Where the weights nearly fill the GPU this gives far more KV than a share of the "
                    "total: Llama-3.1-70B FP8 on one H100 holds 5.8 GiB of KV at 0.95 against 2.1 GiB under "
                    "`gpu_memory_utilization: 0.95` (`sim kv --kv-cache-free-gpu-mem-fraction F`).")
    weight_dtype: WeightDtypeName = Field(
        "bf16", description="Weight bytes per parameter; `fp4` is NVFP4 as stored: 4-bit values and one 8-bit "
                            "scale per 16, 0.5625 bytes.")
    compute_dtype: ComputeDtypeName | None = Field(  # sim/cost/datasheet.py
        None,
        description="The GEMMs' math mode; `fp16-acc16` is fp16 inputs with fp16 accumulate (twice fp16 on "
                    "GeForce cards), `fp4` Blackwell's. Unset, it follows the weights: bf16/fp32 weights run "
                    "bf16, fp16 weights fp16; fp8 weights fp8 (W8A8) where the GPU has fp8, else bf16 "
                    "weight-only; fp4 weights fp4 (W4A4) where the GPU has fp4 (`b200`), else bf16 weight-only; "
                    "int8/int4 weights bf16 weight-only (W8A16/W4A16, as Marlin/Machete), their weight reads "
                    "charged the calibration's `dequant` fraction of the bandwidth. `int8` with int8 weights is "
                    "W8A8 (SmoothQuant). A mode the calibration has no `compute_peaks` entry for is an error. "
                    "Attention runs at the bf16 peak; activations outside the GEMMs stay 16-bit.")
    embedding_dtype: WeightDtypeName | None = Field(  # sim/model/dtypes.py
        None,
        description="The token embedding table and the lm_head (the vocabulary matrices): their memory, and "
                    "the lm_head's weight reads and GEMM. Unset: bf16 under quantized weights, else the "
                    "weights' dtype. FP8, AWQ/GPTQ, NVFP4 and MXFP4 checkpoints keep both 16-bit, as the "
                    "default does (Qwen3-8B-FP8 loads in 8.8 GiB in vLLM: 7.6 if they were fp8); a GGUF file "
                    "(llama.cpp) quantizes them too, and gpt-fast's int8/int4 the lm_head: set `int8` / `int4` "
                    "there.")
    kv_dtype: DtypeName = Field(
        "bf16", description="KV cache elements: `fp8` has one scale per tensor (no per-token overhead); `int8` "
                            "and `int4` one 2-byte scale per `kv_quant_group_size` elements, counted in the "
                            "bytes per token.")
    kv_quant_group_size: pos_int("engine.kv_quant_group_size") = Field(
        64, description="Elements per scale for int8 / int4 KV.")
    activation_peak_bytes: nonneg_int("engine.activation_peak_bytes") | None = Field(
        None, description="Override the memory plan's activation estimate "
                          "([the memory plan](../guides/kv-memory.md#the-memory-plan)).")
    runtime_overhead_bytes: nonneg_int("engine.runtime_overhead_bytes") | None = Field(
        None, description="Non-torch memory the engine subtracts: workspaces, NCCL and all-reduce buffers. "
                          "Unset: 164 MiB (614 MiB with tensor parallelism; 768 MiB for non-vLLM profiles).")
    memory_accounting: Literal["increase", "total-used"] = Field(  # sim/model/memory.py
        "increase",
        description="What the vLLM version counts outside PyTorch when it sizes the KV pool: `increase` (vLLM "
                    "0.6.5 and later, V1: only what the profile run adds, 164 MiB unset) or `total-used` (0.2.5 to "
                    "0.6.4: all the memory in use besides PyTorch's tensors, the process's CUDA context included, "
                    "358 MiB unset). vLLM profiles only; `runtime_overhead_bytes` wins over both "
                    "([the memory plan](../guides/kv-memory.md#the-memory-plan)).")
    num_gpu_blocks_override: pos_int("engine.num_gpu_blocks_override") | None = Field(
        None, description="Force the KV pool size, in blocks.")
    host_memory_gb: pos_float("engine.host_memory_gb") | None = Field(  # sim/engine/host_memory.py
        None, description="Host RAM the engine's machine gives it, in GiB: `kv.offload`'s CPU tier and "
                          "`kv.swap_space_gb` must fit in it (checked with `kv.offload` only). Unset: 128 GiB "
                          "per GPU of the engine (`tensor_parallel_size` of them), a cloud GPU node's share "
                          "([KV offload](../KV_OFFLOAD.md#host-memory)).")
    tensor_parallel_size: Literal[1, 2, 4, 8] = Field(  # sim/model/parallel.py
        1,
        description="GPUs of the scenario's `gpu` one replica is split over, as vLLM does: the memory plan is "
                    "per GPU, and a step adds the all-reduces, timed by the calibration's `interconnect` (a "
                    "calibration without one is an error). It must divide the attention heads, and divide the "
                    "KV heads or be a multiple of them "
                    "([tensor parallelism](../concepts/parallelism.md#tensor-parallelism)).")
    attention_data_parallel: bool = Field(  # sim/model/memory.py
        False,
        description="With `tensor_parallel_size` N > 1: the N GPUs run attention data-parallel (SGLang's "
                    "`--enable-dp-attention`): each keeps all the attention heads and its own requests' KV, "
                    "while the MLP, the experts and the vocabulary stay split over the N. A datasheet "
                    "calibration only; no pipeline parallelism "
                    "([attention data parallelism](../concepts/parallelism.md#attention-data-parallelism)).")
    # pipeline parallelism (issue #15): stages of layers, tp x pp GPUs a replica (sim/engine/pipeline/simulation.py)
    pipeline_parallel_size: Literal[1, 2, 4, 8] = Field(
        1,
        description="Stages of consecutive layers (at most the model's layers), each on `tensor_parallel_size` "
                    "GPUs: tp x pp GPUs a replica. `sim run`, `sim sweep` and `sim plan`, not `sim validate` "
                    "([pipeline parallelism](../concepts/parallelism.md#pipeline-parallelism)).")
    pipeline_mode: _choice(PipelineMode) | None = Field(  # None: the profile's form (profile_schema.PIPELINE_MODES)
        None,
        description="How a pipeline-parallel engine keeps batches in flight: `batch-queue` (vLLM V1: one "
                    "scheduler and one KV pool, up to pp batches in flight) or `virtual-engines` (vLLM V0: pp "
                    "schedulers with 1/pp of the blocks each; not with `cluster.num_replicas` > 1). Unset: the "
                    "profile's ([pipeline forms](../concepts/parallelism.md#pipeline-forms)).")

    gpu_p2p: bool = Field(  # sim/calib/host_staged.py
        True,
        description="Whether the `tensor_parallel_size` GPUs reach each other's memory (NVLink, or PCIe peer "
                    "access). `false`, as on GeForce cards and many VMs and container platforms (vLLM logs \"Custom "
                    "allreduce is disabled because your platform lacks GPU P2P capability\"): the engine's own "
                    "all-reduce is off and NCCL stages every all-reduce and all-gather through pinned host memory, "
                    "timed by a measured host-staged curve scaled to the calibration's `pcie_bandwidth_bytes_per_s` "
                    "instead of its `interconnect` (about 12 us a call, 0.31 of the host copy rate for large "
                    "messages). Not with `pipeline_parallel_size` > 1 "
                    "([GPUs without peer access](../concepts/parallelism.md#gpus-without-peer-access)).")

    @field_validator("api_servers")
    @classmethod
    def _servers_need_a_server(cls, value, info):
        if value > 1 and info.data.get("entrypoint") is Entrypoint.OFFLINE:
            raise ValueError("an offline entrypoint has no API server: leave api_servers at 1")
        return value

    @field_validator("tensor_parallel_size", "pipeline_parallel_size", mode="before")
    @classmethod
    def _tp_not_bool(cls, value):
        if isinstance(value, bool) or isinstance(value, float):  # YAML's true or 2.0 would pass as 1 or 2
            raise ValueError(f"expected 1, 2, 4 or 8, got {value!r}")
        return value

"""Engine profiles: how a real serving engine spends each step around its kernels.

The kernels of a step cost the same in every engine; what differs is the work around
them. ``eager`` is kvsim's original model: every kernel launched from the host one by
one, plus the calibration's fixed ``step_overhead_s``. Real engines hide most launches by
replaying CUDA graphs captured at start-up for a set of batch sizes (a batch is padded up
to the next captured size), spend host (CPU) time per step and per sequence on scheduling,
preparing inputs and sampling, may overlap that host time with the GPU's work on the
previous step (async scheduling), and run a front end (tokenise, detokenise, stream) on
CPU cores of its own. A profile holds those choices and numbers; ``ProfiledCost``
(sim/cost/profiled.py) applies them around a cost model built without the calibration's
step overhead:

    device_s = graph replay (launches hidden, batch padded; graph_kernel_s a kernel) if the step's
               batch is captured, else the eager kernel sum (a launch per kernel)
    host_s   = step_host_s + seq_host_s x sequences in the step
               (+ frontend_token_s x sequences where output processing runs inline)
    exposed  = exposed_step_host_s + exposed_seq_host_s x sequences in the step
               + exposed_kv_token_host_s x the KV tokens its decodes attend to
    step_s   = max(device_s + exposed, host_s) with async scheduling, else device_s + host_s

Graph modes: ``decode`` captures pure-decode batches only (vLLM V0, SGLang, TensorRT-LLM);
``full-and-piecewise`` (vLLM V1's default ``cudagraph_mode``) also replays mixed and
prefill steps of up to the largest captured size in tokens as piecewise graphs, with the
attention kernels launched eagerly between the pieces. ``gqa_shared_kv_reads: false``: decode
reads each KV head once per query head (TensorRT-LLM's masked MHA before XQA; sim/cost/build.py).

Where each default comes from is written next to it in ``PROFILES``; the host-time
numbers are fitted over the published cases in benchmarks/published (never to one case). Pure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from sim.cost import collectives as coll
from sim.cost.profile_kinds import (Entrypoint, GraphMode, OutputProcessing, ProfileName, v0_capture_sizes,
                                     vllm_capture_sizes)


#: What a kernel of a CUDA-graph replay costs the GPU besides its work: the launch and teardown
#: between one kernel's last thread block and the next one's first, when no weights stream. Hazy
#: Research measured about 1.3 us a kernel on an H100 with CUDA graphs ("Look Ma, No Bubbles",
#: 2025-05-27: vLLM and SGLang reach at most 50% of the bandwidth on Llama-1B at batch 1, a megakernel
#: 78%). Charged on every kernel kvsim counts in a replayed step (its GEMMs, norms, RoPE, activation,
#: KV write, attention and collectives), on every GPU alike.
GRAPH_KERNEL_S = 1.3e-6


@dataclass(frozen=True)
class SchedulerRules:
    """Scheduling decisions an engine makes its own way, beyond the scenario's keys. The
    defaults are kvsim's generic continuous batching; ``VLLM_0_33`` is vLLM 0.33.0's V1
    scheduler, checked decision by decision against vLLM's own classes (tests/conformance/,
    docs/CONFORMANCE.md). A later vLLM that changes a rule gets rules of its own."""

    mirrors: str = ""  # the engine release these rules were checked against ("" none)
    null_block: bool = False  # one block of the pool is the engine's null block, never allocated
    decodes_first: bool = True  # chunked prefill: running decodes are served before running prefills
    #: a waiting request is admitted only when its whole sequence (prompt and any output so far)
    #: fits the free blocks, not only its first chunk (vLLM's scheduler_reserve_full_isl)
    admit_full_sequence: bool = False
    #: freed blocks holding no hash go to the front of the free queue (reused first, the
    #: request's last block first); hashed ones to the back (vLLM 0.33's BlockPool)
    unhashed_blocks_first: bool = False
    #: with async scheduling, a request that finished in a step keeps its seat and blocks
    #: through the next step's scheduling: that step is scheduled before the output is in
    async_finish_lag: bool = False
    #: SGLang 0.4: requests that ignore EOS (with no prefix cache) are admitted only while the pool
    #: covers every running request's remaining output in finishing order (sim/sched/sglang_admit.py)
    ignore_eos_admission: bool = False


VLLM_0_33 = SchedulerRules(mirrors="vLLM 0.33.0", null_block=True, decodes_first=False,
                           admit_full_sequence=True, unhashed_blocks_first=True, async_finish_lag=True)


@dataclass(frozen=True)
class EngineProfile:
    """One engine's step model (module docstring). Times in seconds."""

    name: str
    graph_mode: GraphMode = GraphMode.NONE
    max_graph_size: int = 0  # largest captured batch (0: the engine's rule from max_num_seqs)
    step_host_s: float = 0.0  # host time per step: scheduling, input preparation, sampling
    seq_host_s: float = 0.0  # host time per sequence in the step
    async_scheduling: bool = False  # host work overlaps the device's (step = max, not sum)
    #: host time per step and per sequence that async scheduling does not hide: it delays the device's next
    #: step, so under async_scheduling a step takes max(device + these, host) (ignored without it: all host
    #: time is exposed then). SGLang 0.4's overlap scheduler (module docstring)
    exposed_step_host_s: float = 0.0
    exposed_seq_host_s: float = 0.0
    exposed_kv_token_host_s: float = 0.0  # per KV token the step's decodes attend to (work that grows with length)
    prefill_first: bool = False  # vLLM V0: waiting prompts run in prefill-only steps first
    scheduler_steps: int = 1  # vLLM V0's --num-scheduler-steps: decode steps a scheduling round runs
    chunked_prefill: bool = False  # default batching policy: chunked-prefill (else continuous)
    prefix_caching: bool = False  # default of kv.prefix_caching
    output_processing: OutputProcessing = OutputProcessing.SEPARATE
    frontend_request_s: float = 0.0  # per request: HTTP handling, tokenising, bookkeeping
    frontend_prompt_token_s: float = 0.0  # per prompt token: tokenising
    frontend_token_s: float = 0.0  # per output token: detokenising and streaming
    frontend_chat_request_s: float = 0.0  # per request of the chat route, before the engine sees it (entrypoint chat)
    uses_calibration_overhead: bool = False  # eager: the calibration's step_overhead_s is the host time
    #: The engine's own weight-only GEMM kernels: (weight dtype, fraction of a bf16 GEMM's bandwidth
    #: they reach) pairs replacing the calibration's ``dequant`` entries (kernels differ more
    #: between engines than between GPUs; empty: the calibration's numbers)
    weight_only_kernels: tuple[tuple[str, float], ...] = ()
    gqa_shared_kv_reads: bool = True  # decode reads a KV head once for its query heads (False: once each)
    graph_kernel_s: float = GRAPH_KERNEL_S  # GPU time a kernel of a graph replay costs besides its work
    reserve_full_length: bool = False  # admit only while every request's prompt + max_tokens fits (no eviction)
    #: its own all-reduce kernel's bounds, NCCL above (sim/cost/collectives.py); None: the linear form for all
    custom_allreduce_bytes: tuple[tuple[int, float], ...] | None = None
    rules: SchedulerRules = SchedulerRules()  # its scheduler's own decisions (SchedulerRules)
    #: scenario defaults the engine sets its own way (sim/config/profile_schema.py fills them where unset):
    #: tokens per KV block, and the KV pool as a share of the memory left free after the weights (None: vLLM's rule)
    block_size: int | None = None
    kv_free_memory_fraction: float | None = None
    pads_to_captured: bool = True  # a batch runs padded up to the next captured size (False: every size as it is)
    #: its GEMMs are cuBLAS's (PyTorch's F.linear, TensorRT-LLM's GEMM plugin): each pays the calibration's
    #: gemm_fixed_s, which NVIDIA's tables measured on them (False: the engine's own GEMV kernels, or a host
    #: time fitted before the term that holds it)
    gemm_fixed_time: bool = True

    @property
    def is_eager(self) -> bool:
        """True when the step model is kvsim's original one (no wrapper needed)."""
        return self.graph_mode is GraphMode.NONE and self.uses_calibration_overhead

    @property
    def has_frontend(self) -> bool:
        """True when requests pass through a modelled front end (its own CPU resource)."""
        streams = self.frontend_token_s > 0 and self.output_processing is OutputProcessing.SEPARATE
        return (streams or self.frontend_request_s > 0 or self.frontend_prompt_token_s > 0
                or self.frontend_chat_request_s > 0)

    def capture_sizes(self, max_num_seqs: int) -> tuple[int, ...]:
        """The batch sizes the engine captures graphs for (empty without graphs)."""
        if self.graph_mode is GraphMode.NONE:
            return ()
        if not self.pads_to_captured:  # every batch up to the limit runs as it is
            return tuple(range(1, (max_num_seqs if self.max_graph_size <= 0 else self.max_graph_size) + 1))
        rule = v0_capture_sizes if self.name == ProfileName.VLLM_V0 else vllm_capture_sizes
        sizes = rule(max_num_seqs if self.max_graph_size <= 0 else self.max_graph_size)
        if self.max_graph_size > 0:
            sizes = tuple(s for s in sizes if s <= self.max_graph_size) or (self.max_graph_size,)
        return sizes

    def offline(self) -> EngineProfile:
        """This profile driven through the engine's own API in process (``entrypoint: offline``:
        vLLM's ``LLM.generate``, ``sgl.Engine``, ``trtllm-bench``): no HTTP server, so no front
        end on a CPU of its own. Output processing that runs inline in the engine loop (vLLM V0's
        detokenisation in ``LLMEngine.step``) stays: the loop does it whoever called it."""
        inline = self.output_processing is OutputProcessing.INLINE
        return dataclasses.replace(self, frontend_request_s=0.0, frontend_prompt_token_s=0.0,
                                   frontend_chat_request_s=0.0,
                                   frontend_token_s=self.frontend_token_s if inline else 0.0)

    def completions(self) -> EngineProfile:
        """This profile's clients on the completions route (``entrypoint: api-server``): no chat time."""
        return dataclasses.replace(self, frontend_chat_request_s=0.0)

    def with_overrides(self, overrides: dict) -> EngineProfile:
        """This profile with some fields replaced (scenario ``engine.profile_overrides``)."""
        if not overrides:
            return self
        values = dict(overrides)
        if "custom_allreduce_max_bytes" in values:  # the engine's own kernel below it (0: NCCL always)
            values["custom_allreduce_bytes"] = coll.custom_allreduce_bound(values.pop("custom_allreduce_max_bytes"))
        for key, enum in (("graph_mode", GraphMode), ("output_processing", OutputProcessing)):
            if key in values:
                values[key] = enum(values[key])
        return dataclasses.replace(self, **values)


#: Host time of a Python engine loop per step and per sequence, fitted over the published
#: step-latency, saturated-throughput and latency-under-load cases (benchmarks/published,
#: benchmarks/fit_host_time.py --rounds 2, 37 cases; refitted 2026-12-01 with the A100's measured
#: efficiencies, off its grid's edges). The V0-era engines of the suite (vLLM 0.6, SGLang 0.3):
#: vLLM's v0.6.0 performance blog (2024-09-05) profiled 0.5.3 serving Llama 3 8B on one H100
#: at 33% of the time in the API server, 29% in scheduling and only 38% on the GPU.
_PY_STEP_HOST_S = 4.0e-3
_PY_SEQ_HOST_S = 40e-6
#: vLLM V1 rewrote the loop to cut that overhead (persistent batch, its own processes for
#: inputs and outputs); the suite has no V1 step-latency case to fit, so its per-step host
#: time comes from the published batch-1 H100 measurements of current engines, at about
#: 1.35x the weights' bandwidth floor: for Llama-3-8B, ~6.5 ms against ~5.9 ms of device time.
_V1_STEP_HOST_S = 0.5e-3
#: Host time per step of a compiled loop (TensorRT-LLM's executor, gpt-fast, llama.cpp),
#: fitted with the above (1.2 ms both times; inside the grid since it reaches 2.4 ms).
_CPP_STEP_HOST_S = 1.2e-3
#: The front end's time per streamed token (detokenise and stream), fitted with the above.
#: Per-request and per-prompt-token costs have no published measurement in the suite: 0,
#: set them with engine.profile_overrides where you have measured your server.
_FRONTEND_REQUEST_S = 0.0
_FRONTEND_TOKEN_S = 80e-6
#: What the chat route (``entrypoint: chat``) adds to each request before the engine sees it, per
#: engine: fitted on the train side (benchmarks/published/fit_chat_route.py, 2026-12-07) from
#: GPUStack's Qwen3-8B H100 runs of vLLM 0.11.0, SGLang 0.5.3.post3 and TensorRT-LLM 1.2.0rc1 under
#: ``vllm bench serve --backend openai-chat`` (vLLM's TTFT is 60 ms at 1 to 8 clients where a prefill
#: takes under 10 ms: a fixed time per request). One source, one GPU, one model: a starting point.
_CHAT_VLLM_V1_S = 51.5e-3
_CHAT_SGLANG_S = 17.5e-3
_CHAT_TRTLLM_PYTORCH_S = 36.0e-3
#: int4 weight-only GEMMs of a torch.compile decoder (gpt-fast, torchao: PyTorch's tinygemm,
#: ``aten._weight_int4pack_mm``) read their 0.5 byte per weight at this fraction of a bf16 GEMM's
#: bandwidth, on A100 and H100 alike, group size 32 or 64: fitted (benchmarks/published/fit_weight_only.py)
#: on torchao's batch-1 table (pytorch/ao torchao/quantization/README.md: A100-80GB Llama-2-7B int4wo-64
#: 201.14 tok/s, Llama-3-8B 180.80, H100 Llama-3.1-8B 241.39; bf16 107.38 / 95.64 / 126.90): ~1.9x bf16,
#: not the ~3.5x of its bytes, so not bandwidth-bound at batch 1 (vLLM's Marlin, dequant.int4, is).
#: Refitted: 0.50 -> 0.52 with the datasheet GEMMs' smooth roofline (kernel_models.py), 0.52 -> 0.56
#: (rows -1.3%, +0.0%, +13.4%) with the A100's measured bandwidth_efficiency 0.79 (its calibration).
_TINYGEMM_INT4 = 0.56

#: LMDeploy's TurboMind: host time of its C++ persistent-batch loop per step and per sequence (request
#: bookkeeping, stop checks, the streaming callback), fitted on the train side of LMDeploy's own A100 tables
#: (benchmarks/published/fit_lmdeploy.py, 19 cases; fits.yaml group engine_host_times): the per-sequence
#: time fits to 0 (its grid 0-60 us), the per-step one to 1.0 ms (grid 0-1.5 ms).
_TURBOMIND_STEP_HOST_S = 1.0e-3
_TURBOMIND_SEQ_HOST_S = 0.0

#: SGLang 0.4's overlap scheduler: host time per step, per sequence and per KV token of the step's decodes
#: that it does not hide. In 0.4.0 the forward thread plans each decode's attention (FlashInfer's plan copies
#: the page table's indptr to the host: it waits for the previous step to finish) and launches it while the
#: scheduler thread, holding the same GIL, processes the previous step's results request by request; and
#: stream_output rebuilds every request's prompt + output ids and sends its whole output so far to the
#: detokenizer every step (Req.init_incremental_detokenize: O(length); 0.5.x keeps that list and sends only
#: the new ids). Fitted on the train side of the SGLang 0.4 H200 cases (E2E and offline throughput; the
#: step and per-token times at their grids' edges): benchmarks/published/fit_sglang_overlap.py.
_SGLANG_EXPOSED_STEP_S = 2.0e-3
_SGLANG_EXPOSED_SEQ_S = 40e-6
_SGLANG_EXPOSED_KV_TOKEN_S = 40e-9

# SGLang >= 0.5 (see PROFILES for its parts; ``sglang-0.4`` adds 0.4's exposed host time)
_SGLANG = EngineProfile(
    ProfileName.SGLANG, graph_mode=GraphMode.DECODE, max_graph_size=160, step_host_s=_PY_STEP_HOST_S,
    seq_host_s=_PY_SEQ_HOST_S, async_scheduling=True, chunked_prefill=True, prefix_caching=True,
    prefill_first=True, frontend_request_s=_FRONTEND_REQUEST_S, frontend_token_s=_FRONTEND_TOKEN_S,
    frontend_chat_request_s=_CHAT_SGLANG_S, rules=SchedulerRules(ignore_eos_admission=True),
    custom_allreduce_bytes=coll.VLLM_CUSTOM_ALLREDUCE)

# TensorRT-LLM: in-flight batching in a C++ executor (small host time per step), decode graphs,
# overlapped scheduling, KV block reuse on, chunked context off, GUARANTEED_NO_EVICT admission.
_TRTLLM = EngineProfile(
    ProfileName.TRTLLM, graph_mode=GraphMode.DECODE, step_host_s=_CPP_STEP_HOST_S,
    async_scheduling=True, prefix_caching=True, reserve_full_length=True,
    frontend_request_s=_FRONTEND_REQUEST_S, frontend_token_s=_FRONTEND_TOKEN_S,
    custom_allreduce_bytes=coll.TRTLLM_CUSTOM_ALLREDUCE)

PROFILES: dict[str, EngineProfile] = {
    ProfileName.EAGER: EngineProfile(ProfileName.EAGER, uses_calibration_overhead=True),
    # vLLM V1 engine, current release: cudagraph_mode FULL_AND_PIECEWISE, chunked prefill and prefix
    # caching on, front end (API server) in its own process, and async scheduling on: vLLM's
    # SchedulerConfig.async_scheduling defaults to None, which vllm/config/vllm.py turns on unless an
    # option is incompatible (vllm PR #27614, late 2025; before it, up to about 0.11, an opt-in
    # --async-scheduling: such a run sets profile_overrides async_scheduling false).
    ProfileName.VLLM_V1: EngineProfile(
        ProfileName.VLLM_V1, graph_mode=GraphMode.FULL_AND_PIECEWISE, step_host_s=_V1_STEP_HOST_S,
        seq_host_s=_PY_SEQ_HOST_S, async_scheduling=True, chunked_prefill=True, prefix_caching=True,
        frontend_request_s=_FRONTEND_REQUEST_S, frontend_token_s=_FRONTEND_TOKEN_S,
        frontend_chat_request_s=_CHAT_VLLM_V1_S,
        custom_allreduce_bytes=coll.VLLM_CUSTOM_ALLREDUCE, rules=VLLM_0_33),
    # vLLM 0.5-0.6 (V0 engine): prefill-first scheduling, graphs for decode batches up to 256,
    # output processing in the engine loop.
    ProfileName.VLLM_V0: EngineProfile(
        ProfileName.VLLM_V0, graph_mode=GraphMode.DECODE, step_host_s=_PY_STEP_HOST_S,
        seq_host_s=_PY_SEQ_HOST_S, prefill_first=True, output_processing=OutputProcessing.INLINE,
        frontend_request_s=_FRONTEND_REQUEST_S, frontend_token_s=_FRONTEND_TOKEN_S,
        custom_allreduce_bytes=coll.VLLM_CUSTOM_ALLREDUCE),
    # SGLang: decode graphs (cuda_graph_max_bs; its default depends on the GPU, 160 taken),
    # the overlap scheduler (host work hidden behind the previous step), chunked prefill in prefill-only
    # steps (enable_mixed_chunk off by default: 0.4.0's get_next_batch_to_run runs a prefill batch first
    # whenever one can be built, the decodes waiting), radix (prefix) cache, tokenizer and detokenizer
    # in processes of their own.
    ProfileName.SGLANG: _SGLANG,
    # SGLang 0.4.x: the same engine, plus the host time 0.4's overlap scheduler does not hide
    # (_SGLANG_EXPOSED_*); SGLang 0.5 removed both causes (FA3 on Hopper, only new ids streamed).
    ProfileName.SGLANG_04: dataclasses.replace(
        _SGLANG, name=ProfileName.SGLANG_04, exposed_step_host_s=_SGLANG_EXPOSED_STEP_S,
        exposed_seq_host_s=_SGLANG_EXPOSED_SEQ_S, exposed_kv_token_host_s=_SGLANG_EXPOSED_KV_TOKEN_S),
    ProfileName.TRTLLM: _TRTLLM,
    # TensorRT-LLM's PyTorch backend (``--backend pytorch``, the default since 1.0): the same kernels,
    # graphs, overlap scheduler and admission, driven by a Python executor loop (PyExecutor) that
    # does per-request work each step as vLLM's and SGLang's loops do: their fitted per-sequence
    # host time (_PY_SEQ_HOST_S), the C++ executor's per-step time kept (no separate fit).
    ProfileName.TRTLLM_PYTORCH: dataclasses.replace(_TRTLLM, name=ProfileName.TRTLLM_PYTORCH,
                                                    seq_host_s=_PY_SEQ_HOST_S,
                                                    frontend_chat_request_s=_CHAT_TRTLLM_PYTORCH_S),
    # A compiled single-stream decoder: every decode step one CUDA-graph replay from a loop
    # with next to no host work, no scheduler, no front end (gpt-fast's torch.compile
    # "reduce-overhead" mode; llama.cpp's CUDA backend, with graph_mode none before its
    # CUDA graphs of May 2024); gpt-fast's tensor parallelism all-reduces through PyTorch's IntraNodeComm.
    ProfileName.COMPILED: EngineProfile(
        ProfileName.COMPILED, graph_mode=GraphMode.DECODE, step_host_s=_CPP_STEP_HOST_S,
        weight_only_kernels=(("int4", _TINYGEMM_INT4),), custom_allreduce_bytes=coll.TORCH_INTRA_NODE_ALLREDUCE,
        gemm_fixed_time=False),  # batch-1 matmuls: inductor's fused Triton reductions (coordinate descent tuning on)
    # LMDeploy's TurboMind engine (lmdeploy/messages.py TurbomindEngineConfig, current defaults): a C++ loop
    # (persistent batch) launching fused kernels without CUDA graphs: its launches queue ahead of the GPU, so a
    # step is charged as a replay (launches hidden, graph_kernel_s a kernel) at its own batch size, no padding;
    # host work not overlapped (no async scheduling); KV blocks of cache_block_seq_len = 64 tokens, the pool
    # cache_max_entry_count = 0.8 of the memory free after the weights (the rule since v0.2.1; before it, of the
    # total); prefill chunked at max_prefill_token_num = 8192 tokens; enable_prefix_caching off; all-reduces on
    # NCCL (communicator "nccl"); its api_server (Python) streams as the other servers' front ends do.
    ProfileName.LMDEPLOY: EngineProfile(
        ProfileName.LMDEPLOY, graph_mode=GraphMode.DECODE, step_host_s=_TURBOMIND_STEP_HOST_S,
        seq_host_s=_TURBOMIND_SEQ_HOST_S, chunked_prefill=True, frontend_request_s=_FRONTEND_REQUEST_S,
        frontend_token_s=_FRONTEND_TOKEN_S, custom_allreduce_bytes=(), block_size=64, kv_free_memory_fraction=0.8,
        pads_to_captured=False, gemm_fixed_time=False),  # its host time, fitted without the term, holds it
}

#: The profile a scenario without ``engine.profile`` models: the current vLLM release.
DEFAULT_PROFILE = ProfileName.VLLM_V1

#: Keys a scenario's ``engine.profile_overrides`` may set.
OVERRIDABLE = tuple(f.name for f in dataclasses.fields(EngineProfile)
                    if f.name not in ("name", "uses_calibration_overhead", "chunked_prefill",
                                      "prefix_caching", "weight_only_kernels", "custom_allreduce_bytes",
                                      "rules", "block_size", "kv_free_memory_fraction", "pads_to_captured",
                                      "gemm_fixed_time")
                    ) + ("custom_allreduce_max_bytes",)

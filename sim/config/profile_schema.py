"""The scenario's engine profile keys: ``engine.profile`` and ``engine.profile_overrides``,
the batching defaults a profile sets (sim/cost/profile.py holds the profiles), and the
pipeline-parallel form each profile runs (``engine.pipeline_mode``, sim/engine/pipeline/simulation.py)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from sim.config.batch_defaults import fill_batch_defaults
from sim.config.limits import nonneg_float, nonneg_int, pos_int
from sim.cost.profile import DEFAULT_PROFILE, PROFILES, GraphMode, OutputProcessing, ProfileName


class ProfileOverrides(BaseModel):
    """Numbers of the profile replaced for this scenario (unset keys keep the profile's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    graph_mode: Annotated[GraphMode, Field(strict=False)] | None = Field(
        None, description="CUDA graphs: `none`, `decode` (decode batches), `full-and-piecewise` (full graphs "
                          "for decode batches, piecewise graphs for mixed steps).")
    max_graph_size: nonneg_int("engine.profile_overrides.max_graph_size") | None = Field(
        None, description="Largest batch captured in a graph (0: the engine's rule from `max_num_seqs`).")
    step_host_s: nonneg_float("engine.profile_overrides.step_host_s") | None = Field(
        None, description="Host seconds per step: scheduling, input preparation, sampling.")
    seq_host_s: nonneg_float("engine.profile_overrides.seq_host_s") | None = Field(
        None, description="Host seconds per sequence in the step.")
    exposed_step_host_s: nonneg_float("engine.profile_overrides.exposed_step_host_s") | None = Field(
        None, description="Host seconds per step that async scheduling does not hide: they delay the device "
                          "(`sglang-0.4`: SGLang 0.4's overlap scheduler; 0 under the other profiles).")
    exposed_seq_host_s: nonneg_float("engine.profile_overrides.exposed_seq_host_s") | None = Field(
        None, description="The same, per sequence in the step.")
    exposed_kv_token_host_s: nonneg_float("engine.profile_overrides.exposed_kv_token_host_s") | None = Field(
        None, description="The same, per KV token the step's decodes attend to (SGLang 0.4 resends each "
                          "request's whole output every step).")
    scheduler_steps: pos_int("engine.profile_overrides.scheduler_steps") | None = Field(
        None, description="vLLM V0's `--num-scheduler-steps` (multi-step scheduling): a scheduling round runs this "
                          "many decode steps, and a request that arrives meanwhile waits for the round's end (1: "
                          "every step).")
    async_scheduling: bool | None = Field(
        None, description="Host work overlaps the device's: a step takes max(device, host), not their sum.")
    prefill_first: bool | None = Field(
        None, description="Waiting prompts run first, in prefill-only steps that stall decodes (vLLM V0; SGLang, whose "
                          "prompt chunks run in steps of their own under chunked prefill).")
    output_processing: Annotated[OutputProcessing, Field(strict=False)] | None = Field(
        None, description="`separate` (a front-end process detokenises and streams) or `inline` (in the engine "
                          "loop, as vLLM V0).")
    frontend_request_s: nonneg_float("engine.profile_overrides.frontend_request_s") | None = Field(
        None, description="Front-end seconds per request: HTTP handling, tokenising, bookkeeping.")
    frontend_prompt_token_s: nonneg_float("engine.profile_overrides.frontend_prompt_token_s") | None = Field(
        None, description="Front-end seconds per prompt token: tokenising.")
    frontend_token_s: nonneg_float("engine.profile_overrides.frontend_token_s") | None = Field(
        None, description="Front-end seconds per output token: detokenising and streaming.")
    frontend_chat_request_s: nonneg_float("engine.profile_overrides.frontend_chat_request_s") | None = Field(
        None, description="Seconds the chat route adds to each request before the engine sees it (chat template, "
                          "its request handling), with `entrypoint: chat`; it delays the request, not the front end's "
                          "other work.")
    gqa_shared_kv_reads: bool | None = Field(
        None, description="`true`: decode attention reads a KV head once for all its query heads; `false`: "
                          "once per query head.")
    graph_kernel_s: nonneg_float("engine.profile_overrides.graph_kernel_s") | None = Field(
        None, description="GPU seconds a replayed kernel costs besides its work (1.3e-6).")
    reserve_full_length: bool | None = Field(
        None, description="`true` (`trtllm`, `trtllm-pytorch`): admit a request only while its prompt + "
                          "max_tokens and every running request's fit, so nothing is preempted; `false`: blocks "
                          "on demand, preempting when the pool runs out.")
    #: the engine's own all-reduce kernel below this many bytes, NCCL above (0: always; sim/cost/collectives.py)
    custom_allreduce_max_bytes: nonneg_float("engine.profile_overrides.custom_allreduce_max_bytes") | None = Field(
        None, description="The engine's own all-reduce kernel below this many bytes on up to 8 GPUs, NCCL above "
                          "(the calibration's measured NCCL curve where it has one); 0: NCCL always, as vLLM's "
                          "`--disable-custom-all-reduce`.")

    def as_dict(self) -> dict:
        return {k: v for k, v in self.model_dump().items() if v is not None}


ProfileChoice = Annotated[ProfileName, Field(strict=False)]


class PipelineMode(StrEnum):
    """How a pipeline-parallel engine keeps batches in flight (sim/engine/pipeline/simulation.py)."""

    VIRTUAL_ENGINES = "virtual-engines"  # vLLM V0: pp schedulers, 1/pp of the KV blocks each
    BATCH_QUEUE = "batch-queue"  # vLLM V1: one scheduler and one pool, up to pp batches in flight


#: The form each profile runs when ``engine.pipeline_mode`` is unset. Only vLLM V0 had virtual
#: engines; vLLM V1 (``EngineCore.step_with_batch_queue``), SGLang (``event_loop_pp``: pp
#: micro-batches over one KV pool) and TensorRT-LLM's PyTorch executor (pp micro-batches,
#: ``inflight_req_ids`` skipped by its scheduler) all keep one scheduler and one pool with up
#: to pp batches in flight; ``eager`` (kvsim's engine-neutral model) and ``compiled`` (one
#: loop, one KV cache) follow them.
PIPELINE_MODES: dict[str, PipelineMode] = {
    name: PipelineMode.VIRTUAL_ENGINES if name == ProfileName.VLLM_V0 else PipelineMode.BATCH_QUEUE
    for name in ProfileName
}


def pipeline_mode(engine) -> PipelineMode:
    """The pipeline form a scenario's ``engine`` section runs: its ``pipeline_mode``, else its profile's."""
    mode = engine.pipeline_mode
    return PipelineMode(mode) if mode is not None else PIPELINE_MODES[engine.profile]


def apply_profile_defaults(data: Any) -> Any:
    """Fill the batching defaults of the scenario's profile into a raw scenario mapping:
    ``scheduler.policy`` (chunked-prefill where the profile chunks), ``kv.prefix_caching``
    (on where the profile caches prefixes and the allocator and token eviction allow it), and
    where the profile has its own (``lmdeploy``) ``kv.block_size`` and
    ``engine.kv_cache_free_gpu_mem_fraction``, and under ``vllm-v1`` ``scheduler.max_num_seqs``
    and ``scheduler.max_num_batched_tokens`` as vLLM V1 picks them for the GPU
    (sim/config/batch_defaults.py).
    Keys the user set are left alone; anything malformed is left to validation. The keys
    filled go in ``profile_defaults`` (a model may still veto them: sim/engine/parts.py)."""
    if not isinstance(data, dict):
        return data
    if "profile_defaults" in data:  # set here only, never by a file
        return {**data, "profile_defaults": "<not a scenario key>"}
    engine = data.get("engine")
    name = engine.get("profile", DEFAULT_PROFILE) if isinstance(engine, dict) else DEFAULT_PROFILE
    profile = PROFILES.get(name) if isinstance(name, str) else None
    if profile is None:
        return data
    out = dict(data)
    filled = []
    sched = out.get("scheduler", {})
    if isinstance(sched, dict) and "policy" not in sched and profile.chunked_prefill:
        out["scheduler"] = {**sched, "policy": "chunked-prefill"}
        filled.append("scheduler.policy")
    kv = out.get("kv", {})
    if isinstance(kv, dict) and "prefix_caching" not in kv and profile.prefix_caching:
        eviction = kv.get("token_eviction")
        evicts = isinstance(eviction, dict) and eviction.get("policy", "none") != "none"
        if kv.get("allocator", "paged") == "paged" and not evicts:
            out["kv"] = {**kv, "prefix_caching": True}
            filled.append("kv.prefix_caching")
    kv = out.get("kv", {})
    if isinstance(kv, dict) and "block_size" not in kv and profile.block_size is not None:
        out["kv"] = {**kv, "block_size": profile.block_size}
        filled.append("kv.block_size")
    eng = out.get("engine", {})
    free = profile.kv_free_memory_fraction
    if isinstance(eng, dict) and free is not None and "kv_cache_free_gpu_mem_fraction" not in eng:
        out["engine"] = {**eng, "kv_cache_free_gpu_mem_fraction": free}
        filled.append("engine.kv_cache_free_gpu_mem_fraction")
    out = fill_batch_defaults(out, filled)  # vllm-v1: vLLM V1's max_num_seqs / token budget for the GPU
    out["profile_defaults"] = tuple(filled)
    return out

"""The scenario schema: frozen pydantic models, one per YAML section.

``sim/config/scenario.py`` loads and validates files against it (and re-exports every name
here). The ``engine`` section is engine_schema.py, the ``workload`` section workload_schema.py
(its arrivals arrival_schema.py), ``cluster`` cluster_schema.py. Every key's ``description`` is
its text on the scenario reference page, docs/reference/scenario.md, which
docs/gen_scenario_reference.py generates from these models (tests/docs checks that the page is
up to date).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from sim.config.arrival_schema import (  # noqa: F401 (re-exported)
    ArrivalProcess, ClosedArrival, ConstantArrival, GammaArrival, OfflineArrival, PoissonArrival)
from sim.config.batch_defaults import DEFAULT_GPU
from sim.config.cluster_schema import ClusterConfig
from sim.config.engine_schema import (  # noqa: F401 (re-exported)
    ComputeDtypeName, DtypeName, EngineConfig, WeightDtypeName, _choice)
from sim.config.limits import FrozenModel as _Frozen, nonneg_float, nonneg_int, pos_float, pos_int
from sim.config.offload_schema import OffloadConfig, OffloadTiers
from sim.config.paths import resolve_in
from sim.config.profile_schema import ProfileOverrides, apply_profile_defaults  # noqa: F401 (re-exported)
from sim.config.workload_schema import (  # noqa: F401 (re-exported)
    Conversation, EmpiricalLength, FixedLength, LengthDist, LogNormalLength, SharedPrefix, TraceReplay,
    UniformLength, Workload, ZipfLength)
from sim.kv import AllocatorKind
from sim.kv.eviction import PrefixEviction
from sim.kv.swap import SwapTransfer
from sim.kv.token_budget import TokenBudget, TokenEviction
from sim.sched import BatchingPolicy, WhenKVFull
from sim.sched.preemption import PreemptionMode
from sim.sched.victim import VictimPolicy

__all__ = [  # the policy choices are defined next to their policies and re-exported
    "AllocatorKind", "ArrivalProcess", "BatchingPolicy", "ClosedArrival", "ComputeDtypeName", "ConstantArrival",
    "Conversation", "DtypeName", "EmpiricalLength", "EngineConfig", "FixedLength", "GammaArrival", "KVConfig",
    "LengthDist", "LogNormalLength", "OfflineArrival", "OffloadConfig", "ProfileOverrides", "PoissonArrival",
    "PosFloat", "PosInt", "PreemptionMode", "PrefixEviction", "SLO", "Scenario", "SchedulerConfig", "SharedPrefix", "TokenBudget",
    "TokenEviction", "TokenEvictionConfig", "TraceReplay", "UniformLength", "VictimPolicy",
    "WhenKVFull", "Workload", "ZipfLength",
]

PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0)]

# ----------------------------------------------------------------------- KV, scheduler, SLO


class TokenEvictionConfig(_Frozen):
    """Per-request KV budget (``sim/kv/token_budget.py``). ``window_tokens`` is the recent
    window W; ``sink_tokens`` S for ``streaming``; ``heavy_tokens`` H for ``h2o-budget``.
    Sizes the policy does not use are ignored; those it uses must be positive."""

    policy: _choice(TokenEviction) = Field(
        TokenEviction.NONE,
        description="`none`; `sliding-window` (the last `window_tokens`; applied automatically with a model's "
                    "native window, e.g. Mistral); `streaming` (`sink_tokens` + the last `window_tokens`, "
                    "StreamingLLM); `h2o-budget` (`heavy_tokens` + the last `window_tokens`, H2O: which tokens "
                    "are kept is not simulated, only the memory and bandwidth). It bounds memory and attention "
                    "reads; quality effects are not simulated. Not with prefix caching.")
    window_tokens: nonneg_int("kv.token_eviction.window_tokens") = Field(
        0, description="The recent window W, in tokens.")
    sink_tokens: nonneg_int("kv.token_eviction.sink_tokens") = Field(
        0, description="Attention-sink tokens S kept at the start (`streaming`).")
    heavy_tokens: nonneg_int("kv.token_eviction.heavy_tokens") = Field(
        0, description="Heavy-hitter tokens H kept (`h2o-budget`).")

    @model_validator(mode="after")
    def _needs_sizes(self):
        needs = {
            TokenEviction.NONE: (),
            TokenEviction.SLIDING_WINDOW: ("window_tokens",),
            TokenEviction.STREAMING: ("sink_tokens", "window_tokens"),
            TokenEviction.H2O_BUDGET: ("heavy_tokens", "window_tokens"),
        }[self.policy]
        for key in needs:  # sizes a policy does not use are ignored (handy with --set)
            if getattr(self, key) <= 0:
                raise ValueError(f"policy '{self.policy}' needs a positive {key}")
        return self

    def budget(self) -> TokenBudget:
        return TokenBudget(self.policy, self.window_tokens, self.sink_tokens, self.heavy_tokens)


class KVConfig(_Frozen):
    """The KV cache: its allocator, blocks, prefix cache, token budget, swap space and CPU tier."""

    allocator: _choice(AllocatorKind) = Field(
        AllocatorKind.PAGED,
        description="`contiguous-static` (reserve `max_model_len` per request), `contiguous-exact` (reserve "
                    "prompt + max_tokens, first fit: external fragmentation), `paged` (blocks on demand).")
    block_size: pos_int("kv.block_size") = Field(16, description="Tokens per KV block.")
    prefix_caching: bool = Field(
        False,
        description="Share full blocks of identical prefixes (paged only; vLLM v1: chained block hashes, LRU "
                    "free queue, tail blocks evicted first). Unset, the profile decides (below); a model with a "
                    "sliding window shorter than `max_model_len` keeps it off.")
    prefix_cache_eviction: _choice(PrefixEviction) = Field(
        PrefixEviction.LRU,
        description="Which freed cached blocks are reused first: `lru` (vLLM v1), `lfu` (fewest hits), `fifo` "
                    "(oldest cached); `lfu` and `fifo` reuse blocks holding nothing cached first.")
    token_eviction: TokenEvictionConfig = Field(
        TokenEvictionConfig(), description="A per-request KV budget (below).")
    swap_space_gb: nonneg_float("kv.swap_space_gb") = Field(
        4.0, description="CPU memory for swapped-out KV, in GB.")
    swap_transfer: _choice(SwapTransfer) = Field(
        SwapTransfer.PER_BLOCK,
        description="How swapped KV crosses PCIe: `per-block` (one copy per block, per layer, for K and V, as "
                    "vLLM v0: small blocks mean many copies) or `gathered` (a device kernel packs a request's "
                    "blocks, then one copy per layer for K and V; costs one device-memory pass).")
    offload: OffloadTiers | None = Field(  # sim/config/offload_schema.py
        None, description="Lower tiers behind the GPU prefix cache (below; unset: none): one tier, or a list "
                          "fastest first (`cpu`, then `disk`); evicted cached blocks are stored in host memory "
                          "(and what it evicts on disk) and loaded back instead of prefilled again "
                          "([KV offload](../KV_OFFLOAD.md)).")

    @field_validator("offload")
    @classmethod
    def _tiers_in_order(cls, offload):
        if isinstance(offload, list) and [t.tier for t in offload] not in (["cpu"], ["cpu", "disk"]):
            raise ValueError("the tiers are listed fastest first: [cpu] or [cpu, disk], got "
                             f"[{', '.join(t.tier for t in offload)}]")
        if isinstance(offload, OffloadConfig) and offload.tier == "disk":
            raise ValueError("a disk tier stores what a CPU tier evicts: give the list [cpu, disk]")
        return offload

    @model_validator(mode="after")
    def _caching_needs_paged(self):
        if self.prefix_caching and self.allocator != AllocatorKind.PAGED:
            raise ValueError("prefix_caching needs allocator 'paged'")
        if self.prefix_caching and self.token_eviction.policy != TokenEviction.NONE:
            raise ValueError("prefix_caching cannot be combined with token_eviction "
                             "(evicted tokens break the shared prefix)")
        return self


class SchedulerConfig(_Frozen):
    """Batching, the token budget, preemption and admission."""

    policy: _choice(BatchingPolicy) = Field(
        BatchingPolicy.CONTINUOUS,
        description="`static` (a batch runs until all its members finish), `continuous` (iteration-level, "
                    "whole prompts), `chunked-prefill` (prompts split to fill the token budget; running "
                    "requests in admission order under `vllm-v1`, as vLLM V1; decodes first under the other "
                    "profiles). Unset, the profile decides (below).")
    max_num_seqs: pos_int("scheduler.max_num_seqs") = Field(
        256, description="Most requests running at once. Unset under `vllm-v1`: vLLM V1's default for the GPU "
                         "(1024 on a GPU of >= 70 GiB that is not an A100, else 256; the calibration's "
                         "`memory_bytes` and `gpu_name`); 256 under the other profiles.")
    max_num_batched_tokens: pos_int("scheduler.max_num_batched_tokens") | None = Field(
        None, description="Token budget per step. Unset under `vllm-v1` with `chunked-prefill`: vLLM V1's "
                          "default for the GPU and `engine.entrypoint` (`offline`: 16384 on a GPU of >= 70 GiB "
                          "that is not an A100, else 8192; `api-server`, `chat`: 16384 from 160 GiB, 8192 from "
                          "70 GiB but an A100, else 2048). Otherwise unset: 8192, or `max_model_len` if larger "
                          "and the policy does not chunk prompts (without chunking it must be at least "
                          "`max_model_len`).")
    preemption: _choice(PreemptionMode) = Field(
        PreemptionMode.RECOMPUTE,
        description="`recompute` (drop the victim's KV, requeue it at the front) or `swap` (copy its KV to CPU "
                    "over PCIe; recompute when swap space is full).")
    preemption_victim: _choice(VictimPolicy) = Field(
        VictimPolicy.LIFO,
        description="Who is preempted when running requests outgrow the pool: `lifo` (most recently admitted, "
                    "vLLM), `fewest-blocks` (cheapest to redo), `most-blocks` (frees most at once), "
                    "`longest-remaining` (longest expected remaining output, from the workload's length "
                    "distribution given what it has generated; never the true length).")
    watermark: Annotated[float, Field(ge=0, lt=0.5, allow_inf_nan=False)] = Field(
        0.0,
        description="Share of the KV pool kept free at admission so running requests can grow (vLLM V0 used "
                    "0.01), in whole blocks (`int(watermark x num_gpu_blocks)`, as vLLM counts it); waived when "
                    "nothing is running.")
    when_kv_full: _choice(WhenKVFull) = Field(
        WhenKVFull.QUEUE,
        description="`queue` (wait, as vLLM) or `reject` (fail with `kv_cache_full`, as a naive pre-allocating "
                    "server runs out of memory).")
    long_prefill_token_threshold: nonneg_int("scheduler.long_prefill_token_threshold") = Field(
        0, description="The most tokens one prompt chunk takes while other requests are in the engine (vLLM's "
                       "`--long-prefill-token-threshold`); 0: no cap.")


class SLO(_Frozen):
    """The latency objective: a request meeting both limits counts towards goodput."""

    ttft_s: pos_float("slo.ttft_s") = Field(2.0, description="Time to first token limit, in seconds.")
    tpot_s: pos_float("slo.tpot_s") = Field(0.2, description="Time per output token limit, in seconds.")


class Scenario(_Frozen):
    """A scenario file: every key but ``workload`` has a default."""

    name: str = Field("scenario", description="A label for outputs; `sim run` writes into `runs/<name>/` "
                                              "(made one safe folder name) unless `--out`.")
    description: str = Field("", description="A label for outputs.")
    seed: nonneg_int("seed") = Field(0, description="One seed drives the whole workload: same seed, same results.")
    model: str = Field("llama-3-8b", description="A preset name (`sim kv --help` lists them) or the path of a "
                                                 "HuggingFace `config.json`.")
    gpu: str = Field(DEFAULT_GPU, description="A calibration name (`./calibrations/<name>.yaml` first, then the "
                                              "shipped ones) or the path of a calibration YAML.")
    engine: EngineConfig = Field(EngineConfig(), description="The engine (below).")
    kv: KVConfig = Field(KVConfig(), description="The KV cache (below).")
    scheduler: SchedulerConfig = Field(SchedulerConfig(), description="The scheduler (below).")
    workload: Workload = Field(description="The requests (below); the one required section.")
    slo: SLO = Field(SLO(), description="The SLO for goodput (below).")
    cluster: ClusterConfig = Field(  # sim/config/cluster_schema.py
        ClusterConfig(), description="Replicas behind a router, or prefill and decode pools (below).")
    # Keys whose values came from the engine profile's defaults, not from the file.
    profile_defaults: tuple[str, ...] = Field(default=(), exclude=True)
    # Where the file came from; relative paths in it resolve against this folder.
    source_path: str = Field(default="<scenario>", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data):
        return apply_profile_defaults(data)

    @property
    def base_dir(self) -> Path:
        return Path(self.source_path).resolve().parent

    def resolve(self, path: str) -> Path:
        return resolve_in(self.base_dir, path)

    @property
    def max_num_batched_tokens(self) -> int:
        explicit = self.scheduler.max_num_batched_tokens
        if explicit is not None:
            return explicit
        if self.scheduler.policy == BatchingPolicy.CHUNKED_PREFILL:
            return 8192
        return max(8192, self.engine.max_model_len)

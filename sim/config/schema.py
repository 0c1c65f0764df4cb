"""The scenario schema: frozen pydantic models, one per YAML section.

``sim/config/scenario.py`` loads and validates files against it (and re-exports every name
here); see README.md, "Scenario reference", for the meaning of each key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from sim.config.arrival_schema import (  # noqa: F401 (re-exported)
    ArrivalProcess, ClosedArrival, ConstantArrival, GammaArrival, OfflineArrival, PoissonArrival)
from sim.config.cluster_schema import ClusterConfig
from sim.config.limits import FrozenModel as _Frozen, nonneg_float, nonneg_int, pos_float, pos_int
from sim.config.offload_schema import OffloadConfig
from sim.config.paths import resolve_in
from sim.config.profile_schema import PipelineMode, ProfileChoice, ProfileOverrides, apply_profile_defaults
from sim.cost.profile import DEFAULT_PROFILE, Entrypoint
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


def _choice(enum):
    """An enum field that accepts its string values (strict mode would demand the enum)."""
    return Annotated[enum, Field(strict=False)]


# ----------------------------------------------------------------------------- choices

DtypeName = Literal["fp16", "bf16", "fp8", "int8", "int4"]
WeightDtypeName = Literal["fp16", "bf16", "fp8", "int8", "int4", "fp4"]  # fp4: NVFP4 weights
#: The math mode of the GEMMs (sim/calib/calibration.py ``compute_peaks``): bf16/fp16 with
#: fp32 accumulate, fp16 with fp16 accumulate (GeForce cards' faster mode), fp8, int8, fp4.
ComputeDtypeName = Literal["bf16", "fp16", "fp16-acc16", "fp8", "int8", "fp4"]

# ----------------------------------------------------------------------- distributions


class _Clip(_Frozen):
    min: pos_int("<length>.min") = 1
    max: pos_int("<length>.max") | None = None

    @model_validator(mode="after")
    def _min_le_max(self):
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class FixedLength(_Clip):
    type: Literal["fixed"]
    value: pos_int("<length>.value")


class UniformLength(_Clip):
    type: Literal["uniform"]
    low: pos_int("<length>.low")
    high: pos_int("<length>.high")

    @model_validator(mode="after")
    def _low_le_high(self):
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


class LogNormalLength(_Clip):
    type: Literal["lognormal"]
    median: pos_float("<length>.median")
    sigma: pos_float("<length>.sigma")


class ZipfLength(_Clip):
    """P(k) proportional to k**-a on the integers [min, max]; max is required."""

    type: Literal["zipf"]
    a: pos_float("<length>.a")
    max: pos_int("<zipf>.max")


class EmpiricalLength(_Clip):
    """Sampled with replacement from one column of a CSV file (e.g. a trace)."""

    type: Literal["empirical"]
    path: str
    column: str


LengthDist = Annotated[
    Union[FixedLength, UniformLength, LogNormalLength, ZipfLength, EmpiricalLength],
    Field(discriminator="type"),
]


class TraceReplay(_Frozen):
    """Arrival times and lengths from a CSV with columns
    ``arrived_at, num_prefill_tokens, num_decode_tokens`` (the Azure 2023 format)."""

    path: str
    speedup: pos_float("workload.trace.speedup") = 1.0  # 2.0 replays the trace twice as fast


class SharedPrefix(_Frozen):
    """``num_prefixes`` system prompts of ``prefix_tokens`` tokens; a share
    ``fraction`` of sessions starts with one of them, picked uniformly, or with Zipf
    popularity (prompt k with probability proportional to k**-zipf_a) when ``zipf_a``
    is set."""

    num_prefixes: pos_int("workload.shared_prefix.num_prefixes")
    prefix_tokens: pos_int("workload.shared_prefix.prefix_tokens")
    fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 1.0
    zipf_a: pos_float("workload.shared_prefix.zipf_a") | None = None


class Conversation(_Frozen):
    """Multi-turn sessions: turn k's prompt is the whole history (previous prompts and
    answers) plus new user tokens drawn from ``workload.prompt_tokens``; the next turn
    arrives ``think_time_s`` (exponential with this mean) after the previous answer."""

    turns: LengthDist
    think_time_s: nonneg_float("workload.conversation.think_time_s") = 5.0


class Workload(_Frozen):
    num_requests: pos_int("workload.num_requests") | None = None
    duration_s: pos_float("workload.duration_s") | None = None
    arrival: ArrivalProcess | None = None
    trace: TraceReplay | None = None
    prompt_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    max_tokens: pos_int("workload.max_tokens") | None = None
    shared_prefix: SharedPrefix | None = None
    conversation: Conversation | None = None

    @model_validator(mode="after")
    def _one_source(self):
        if self.trace is not None:
            for key in ("arrival", "prompt_tokens", "output_tokens", "conversation"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' cannot be combined with 'trace' (the trace gives it)")
        else:
            for key in ("arrival", "prompt_tokens", "output_tokens"):
                if getattr(self, key) is None:
                    raise ValueError(f"'{key}' is required unless 'trace' is given")
            if self.num_requests is None and self.duration_s is None:
                raise ValueError("give 'num_requests' or 'duration_s' (or both)")
            if isinstance(self.arrival, OfflineArrival) and self.num_requests is None:
                raise ValueError("an offline arrival (every request at t = 0) needs 'num_requests'")
            if isinstance(self.arrival, ClosedArrival) and (self.num_requests is None or self.duration_s is not None
                                                            or self.conversation is not None):
                raise ValueError("a closed arrival (clients that each send their next request after an answer) "
                                 "needs 'num_requests', and takes neither 'duration_s' nor 'conversation'")
        return self


# ----------------------------------------------------------------------- engine parts


class EngineConfig(_Frozen):
    profile: ProfileChoice = DEFAULT_PROFILE  # how the engine spends a step (sim/cost/profile.py)
    profile_overrides: ProfileOverrides = ProfileOverrides()
    entrypoint: _choice(Entrypoint) = Entrypoint.API_SERVER  # offline: no HTTP front end (sim/cost/profile.py)
    api_servers: pos_int("engine.api_servers") = 1  # front-end processes (sim/engine/step/frontend.py)
    max_model_len: pos_int("engine.max_model_len") = 8192
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.9
    #: TensorRT-LLM's KV sizing: this share of the memory left free after the weights and activations
    #: (replaces gpu_memory_utilization; sim/model/memory.py)
    kv_cache_free_gpu_mem_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    weight_dtype: WeightDtypeName = "bf16"
    compute_dtype: ComputeDtypeName | None = None  # None: follows weight_dtype (sim/cost/datasheet.py)
    embedding_dtype: WeightDtypeName | None = None  # None: bf16 under quantized weights (sim/model/dtypes.py)
    kv_dtype: DtypeName = "bf16"
    kv_quant_group_size: pos_int("engine.kv_quant_group_size") = 64
    activation_peak_bytes: nonneg_int("engine.activation_peak_bytes") | None = None
    runtime_overhead_bytes: nonneg_int("engine.runtime_overhead_bytes") | None = None
    num_gpu_blocks_override: pos_int("engine.num_gpu_blocks_override") | None = None
    tensor_parallel_size: Literal[1, 2, 4, 8] = 1  # GPUs one replica is split over (sim/model/parallel.py)
    attention_data_parallel: bool = False  # those GPUs run attention data-parallel (sim/model/memory.py)
    # pipeline parallelism (issue #15): stages of layers, tp x pp GPUs a replica (sim/engine/pipeline/simulation.py)
    pipeline_parallel_size: Literal[1, 2, 4, 8] = 1
    pipeline_mode: _choice(PipelineMode) | None = None  # None: the profile's form (profile_schema.PIPELINE_MODES)

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


class TokenEvictionConfig(_Frozen):
    """Per-request KV budget (``sim/kv/token_budget.py``). ``window_tokens`` is the recent
    window W; ``sink_tokens`` S for ``streaming``; ``heavy_tokens`` H for ``h2o-budget``.
    Sizes the policy does not use are ignored."""

    policy: _choice(TokenEviction) = TokenEviction.NONE
    window_tokens: nonneg_int("kv.token_eviction.window_tokens") = 0
    sink_tokens: nonneg_int("kv.token_eviction.sink_tokens") = 0
    heavy_tokens: nonneg_int("kv.token_eviction.heavy_tokens") = 0

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
    allocator: _choice(AllocatorKind) = AllocatorKind.PAGED
    block_size: pos_int("kv.block_size") = 16
    prefix_caching: bool = False
    prefix_cache_eviction: _choice(PrefixEviction) = PrefixEviction.LRU
    token_eviction: TokenEvictionConfig = TokenEvictionConfig()
    swap_space_gb: nonneg_float("kv.swap_space_gb") = 4.0
    swap_transfer: _choice(SwapTransfer) = SwapTransfer.PER_BLOCK
    offload: OffloadConfig | None = None  # a CPU tier (sim/config/offload_schema.py)

    @model_validator(mode="after")
    def _caching_needs_paged(self):
        if self.prefix_caching and self.allocator != AllocatorKind.PAGED:
            raise ValueError("prefix_caching needs allocator 'paged'")
        if self.prefix_caching and self.token_eviction.policy != TokenEviction.NONE:
            raise ValueError("prefix_caching cannot be combined with token_eviction "
                             "(evicted tokens break the shared prefix)")
        return self


class SchedulerConfig(_Frozen):
    policy: _choice(BatchingPolicy) = BatchingPolicy.CONTINUOUS
    max_num_seqs: pos_int("scheduler.max_num_seqs") = 256
    max_num_batched_tokens: pos_int("scheduler.max_num_batched_tokens") | None = None  # None: 8192, or max_model_len if larger and not chunked
    preemption: _choice(PreemptionMode) = PreemptionMode.RECOMPUTE
    preemption_victim: _choice(VictimPolicy) = VictimPolicy.LIFO
    watermark: Annotated[float, Field(ge=0, lt=0.5, allow_inf_nan=False)] = 0.0  # pool share kept free at admission
    when_kv_full: _choice(WhenKVFull) = WhenKVFull.QUEUE
    #: a prompt chunk takes at most this many tokens while other requests are in the engine (vLLM's
    #: --long-prefill-token-threshold; 0: no cap)
    long_prefill_token_threshold: nonneg_int("scheduler.long_prefill_token_threshold") = 0


class SLO(_Frozen):
    ttft_s: pos_float("slo.ttft_s") = 2.0
    tpot_s: pos_float("slo.tpot_s") = 0.2


class Scenario(_Frozen):
    name: str = "scenario"
    description: str = ""
    seed: nonneg_int("seed") = 0
    model: str = "llama-3-8b"
    gpu: str = "a100-80gb"
    engine: EngineConfig = EngineConfig()
    kv: KVConfig = KVConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    workload: Workload
    slo: SLO = SLO()
    cluster: ClusterConfig = ClusterConfig()  # replicas behind a router (sim/config/cluster_schema.py)
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

"""A scenario: YAML in, frozen and validated configuration out.

All validation of user input happens here, once, at load. Every later module may assume
the configuration is well-formed and never mutates it. Bad input raises
:class:`sim.errors.ConfigError` naming the file, the key path and what is allowed.

Schema (see README.md, "Scenario reference", for the full table)::

    name, description, seed, model, gpu
    engine:    max_model_len, gpu_memory_utilization, weight_dtype, kv_dtype, ...
    kv:        allocator, block_size, prefix_caching, prefix_cache_eviction,
               token_eviction {policy, window_tokens, sink_tokens, heavy_tokens}, swap_space_gb
    scheduler: policy, max_num_seqs, max_num_batched_tokens, preemption,
               preemption_victim, watermark, when_kv_full
    workload:  num_requests | duration_s, arrival | trace, prompt_tokens, output_tokens,
               max_tokens, shared_prefix, conversation
    slo:       ttft_s, tpot_s
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sim.errors import ConfigError
from sim.kv import AllocatorKind
from sim.kv.eviction import PrefixEviction
from sim.kv.token_budget import TokenBudget, TokenEviction
from sim.sched import BatchingPolicy, WhenKVFull
from sim.sched.preemption import PreemptionMode
from sim.sched.victim import VictimPolicy

__all__ = [  # the policy choices are defined next to their policies, re-exported here
    "AllocatorKind", "BatchingPolicy", "PreemptionMode", "PrefixEviction", "TokenEviction",
    "VictimPolicy", "WhenKVFull", "Scenario", "load_scenario", "parse_scenario",
]

PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0)]


def _choice(enum):
    """An enum field that accepts its string values (strict mode would demand the enum)."""
    return Annotated[enum, Field(strict=False)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# ----------------------------------------------------------------------------- choices


DtypeName = Literal["fp16", "bf16", "fp8", "int8", "int4"]

# ----------------------------------------------------------------------- distributions


class _Clip(_Frozen):
    min: PosInt = 1
    max: PosInt | None = None

    @model_validator(mode="after")
    def _min_le_max(self):
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class FixedLength(_Clip):
    type: Literal["fixed"]
    value: PosInt


class UniformLength(_Clip):
    type: Literal["uniform"]
    low: PosInt
    high: PosInt

    @model_validator(mode="after")
    def _low_le_high(self):
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


class LogNormalLength(_Clip):
    type: Literal["lognormal"]
    median: PosFloat
    sigma: PosFloat


class ZipfLength(_Clip):
    """P(k) proportional to k**-a on the integers [min, max]; max is required."""

    type: Literal["zipf"]
    a: PosFloat
    max: PosInt


class EmpiricalLength(_Clip):
    """Sampled with replacement from one column of a CSV file (e.g. a trace)."""

    type: Literal["empirical"]
    path: str
    column: str


LengthDist = Annotated[
    Union[FixedLength, UniformLength, LogNormalLength, ZipfLength, EmpiricalLength],
    Field(discriminator="type"),
]


class PoissonArrival(_Frozen):
    type: Literal["poisson"]
    rate: PosFloat  # requests per second


class GammaArrival(_Frozen):
    """Inter-arrival times from a gamma distribution: cv > 1 is burstier than Poisson."""

    type: Literal["gamma"]
    rate: PosFloat
    cv: PosFloat


class ConstantArrival(_Frozen):
    type: Literal["constant"]
    rate: PosFloat


ArrivalProcess = Annotated[
    Union[PoissonArrival, GammaArrival, ConstantArrival], Field(discriminator="type")
]


class TraceReplay(_Frozen):
    """Arrival times and lengths from a CSV with columns
    ``arrived_at, num_prefill_tokens, num_decode_tokens`` (the Azure 2023 format)."""

    path: str
    speedup: PosFloat = 1.0  # 2.0 replays the trace twice as fast


class SharedPrefix(_Frozen):
    """``num_prefixes`` system prompts of ``prefix_tokens`` tokens; a share
    ``fraction`` of sessions starts with one of them, picked uniformly, or with Zipf
    popularity (prompt k with probability proportional to k**-zipf_a) when ``zipf_a``
    is set."""

    num_prefixes: PosInt
    prefix_tokens: PosInt
    fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
    zipf_a: PosFloat | None = None


class Conversation(_Frozen):
    """Multi-turn sessions: turn k's prompt is the whole history (previous prompts and
    answers) plus new user tokens drawn from ``workload.prompt_tokens``; the next turn
    arrives ``think_time_s`` (exponential with this mean) after the previous answer."""

    turns: LengthDist
    think_time_s: Annotated[float, Field(ge=0)] = 5.0


class Workload(_Frozen):
    num_requests: PosInt | None = None
    duration_s: PosFloat | None = None
    arrival: ArrivalProcess | None = None
    trace: TraceReplay | None = None
    prompt_tokens: LengthDist | None = None
    output_tokens: LengthDist | None = None
    max_tokens: PosInt | None = None
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
        return self


# ----------------------------------------------------------------------- engine parts


class EngineConfig(_Frozen):
    max_model_len: PosInt = 8192
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    weight_dtype: DtypeName = "bf16"
    kv_dtype: DtypeName = "bf16"
    kv_quant_group_size: PosInt = 64
    activation_peak_bytes: Annotated[int, Field(ge=0)] | None = None
    runtime_overhead_bytes: Annotated[int, Field(ge=0)] | None = None
    num_gpu_blocks_override: PosInt | None = None


class TokenEvictionConfig(_Frozen):
    """Per-request KV budget (``sim/kv/token_budget.py``). ``window_tokens`` is the recent
    window W; ``sink_tokens`` S for ``streaming``; ``heavy_tokens`` H for ``h2o-budget``.
    Sizes the policy does not use are ignored."""

    policy: _choice(TokenEviction) = TokenEviction.NONE
    window_tokens: Annotated[int, Field(ge=0)] = 0
    sink_tokens: Annotated[int, Field(ge=0)] = 0
    heavy_tokens: Annotated[int, Field(ge=0)] = 0

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
    block_size: PosInt = 16
    prefix_caching: bool = False
    prefix_cache_eviction: _choice(PrefixEviction) = PrefixEviction.LRU
    token_eviction: TokenEvictionConfig = TokenEvictionConfig()
    swap_space_gb: Annotated[float, Field(ge=0)] = 4.0

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
    max_num_seqs: PosInt = 256
    max_num_batched_tokens: PosInt | None = None  # None: 8192, or max_model_len if larger and not chunked
    preemption: _choice(PreemptionMode) = PreemptionMode.RECOMPUTE
    preemption_victim: _choice(VictimPolicy) = VictimPolicy.LIFO
    watermark: Annotated[float, Field(ge=0, lt=0.5)] = 0.0  # pool share kept free at admission
    when_kv_full: _choice(WhenKVFull) = WhenKVFull.QUEUE


class SLO(_Frozen):
    ttft_s: PosFloat = 2.0
    tpot_s: PosFloat = 0.2


class Scenario(_Frozen):
    name: str = "scenario"
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    model: str = "llama-3-8b"
    gpu: str = "a100-80gb"
    engine: EngineConfig = EngineConfig()
    kv: KVConfig = KVConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    workload: Workload
    slo: SLO = SLO()
    # Where the file came from; relative paths in it resolve against this folder.
    source_path: str = Field(default="<scenario>", exclude=True)

    @property
    def base_dir(self) -> Path:
        return Path(self.source_path).resolve().parent

    def resolve(self, path: str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.base_dir / p

    @property
    def max_num_batched_tokens(self) -> int:
        explicit = self.scheduler.max_num_batched_tokens
        if explicit is not None:
            return explicit
        if self.scheduler.policy == BatchingPolicy.CHUNKED_PREFILL:
            return 8192
        return max(8192, self.engine.max_model_len)


# ------------------------------------------------------------------------------ loading


def _cross_checks(sc: Scenario) -> list[tuple[str, str]]:
    """Checks that need more than one section; returns (key.path, message) pairs."""
    problems = []
    mml = sc.engine.max_model_len
    if (
        sc.scheduler.policy != BatchingPolicy.CHUNKED_PREFILL
        and sc.max_num_batched_tokens < mml
    ):
        problems.append((
            "scheduler.max_num_batched_tokens",
            f"{sc.max_num_batched_tokens} is below engine.max_model_len {mml}: without chunked "
            "prefill a long prompt could never be scheduled; raise it or use policy 'chunked-prefill'",
        ))
    wl = sc.workload
    if wl.prompt_tokens is not None and wl.prompt_tokens.min > mml - 1:
        problems.append((
            "workload.prompt_tokens",
            f"every prompt is at least {wl.prompt_tokens.min} tokens, but engine.max_model_len "
            f"is {mml}: allowed prompts are shorter than max_model_len",
        ))
    if isinstance(wl.prompt_tokens, FixedLength) and wl.prompt_tokens.value >= mml:
        problems.append((
            "workload.prompt_tokens.value",
            f"a prompt of {wl.prompt_tokens.value} tokens does not fit engine.max_model_len {mml}",
        ))
    if wl.shared_prefix is not None and wl.shared_prefix.prefix_tokens >= mml:
        problems.append((
            "workload.shared_prefix.prefix_tokens",
            f"{wl.shared_prefix.prefix_tokens} must be below engine.max_model_len {mml}",
        ))
    for key, dist in (("prompt_tokens", wl.prompt_tokens), ("output_tokens", wl.output_tokens)):
        if isinstance(dist, EmpiricalLength) and not sc.resolve(dist.path).is_file():
            problems.append((f"workload.{key}.path", f"file not found: {dist.path}"))
    if wl.trace is not None and not sc.resolve(wl.trace.path).is_file():
        problems.append(("workload.trace.path", f"file not found: {wl.trace.path}"))
    return problems


def _key_path(loc: tuple, data: Any) -> str:
    """Turn a pydantic error location into a user's key path, dropping union tags."""
    parts, node = [], data
    for item in loc:
        if isinstance(node, dict) and item in node:
            parts.append(str(item))
            node = node[item]
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            parts.append(str(item))
            node = node[item]
        elif isinstance(item, str) and (not isinstance(node, dict) or "type" not in node or item != node.get("type")):
            parts.append(str(item))  # a missing or unknown key: still name it
            node = None
    return ".".join(parts) or "<top>"


def _allowed_keys(loc: tuple) -> list[str]:
    """Known keys at the parent of ``loc`` (for 'unknown key' messages)."""
    candidates: list[Any] = [Scenario]
    for item in loc[:-1]:
        tagged = [m for m in candidates if _tag(m) == item]
        if tagged:  # a discriminated-union tag in the location picks the variant
            candidates = tagged
            continue
        nxt = []
        for model in candidates:
            field = model.model_fields.get(item)
            if field is not None:
                nxt.extend(_models_in(field.annotation))
        if not nxt:
            return []
        candidates = nxt
    if len(candidates) != 1:
        return []
    return sorted(k for k in candidates[0].model_fields if k != "source_path")


def _tag(model: Any) -> Any:
    field = model.model_fields.get("type")
    args = getattr(field.annotation, "__args__", ()) if field is not None else ()
    return args[0] if len(args) == 1 else None


def _models_in(ann: Any) -> list:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    found = []
    for arg in getattr(ann, "__args__", ()) or ():
        found.extend(_models_in(arg))
    return found


def _explain(err: dict, data: Any) -> tuple[str, str]:
    loc = tuple(err["loc"])
    key = _key_path(loc, data)
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc)
        return key, "unknown key" + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return key, "required key is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        key = f"{key}.type"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    got = err.get("input")
    if kind not in ("value_error",) and not isinstance(got, (dict, list)):
        msg = f"{msg} (got {got!r})"
    return key, msg


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate an already-parsed YAML document. Raises ConfigError on the first problem."""
    if not isinstance(data, dict):
        raise ConfigError(source, "<top>", "a scenario must be a YAML mapping of keys to values")
    try:
        sc = Scenario.model_validate({**data, "source_path": source})
    except ValidationError as exc:
        key, msg = _explain(exc.errors()[0], data)
        raise ConfigError(source, key, msg) from None
    problems = _cross_checks(sc)
    if problems:
        raise ConfigError(source, *problems[0])
    return sc


def set_override(data: dict, assignment: str, source: str = "--set") -> None:
    """Apply ``key.path=value`` (value parsed as YAML) to a raw scenario mapping in place."""
    if "=" not in assignment:
        raise ConfigError(source, assignment, "expected key.path=value")
    path, _, raw = assignment.partition("=")
    keys = path.strip().split(".")
    if not all(keys):
        raise ConfigError(source, path, "empty key in key path")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ConfigError(source, path, f"cannot parse value {raw!r} as YAML") from None
    node = data
    for k in keys[:-1]:
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(source, path, f"'{k}' is not a mapping")
        node = nxt
    node[keys[-1]] = value


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning I/O and syntax problems into ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(path), "<file>", "file not found")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<yaml>"
        raise ConfigError(str(path), where, f"malformed YAML: {getattr(exc, 'problem', exc)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "<file>", f"cannot read: {exc}") from None


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    """Read, override (``--set``) and validate a scenario file."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "<top>", "a scenario must be a YAML mapping of keys to values")
    for assignment in overrides:
        set_override(data, assignment, source=str(path))
    return parse_scenario(data, str(path))

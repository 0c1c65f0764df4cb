"""Ceilings (and floors) of every numeric scenario key: the one table, checked at load.

A value past a ceiling would not be a bigger question but a hang, an out-of-memory or a
NaN in summary.json later (a typo such as ``duration_s: 1e12``), so the scenario schema
(``schema.py``) takes its bounds from here and loading refuses such values before
anything is allocated. docs/reference/scenario.md, generated from the schema, states every bound.

Keys are written as on that page; ``<length>`` stands for any length distribution
(``workload.prompt_tokens``, ``workload.output_tokens``, ``workload.conversation.turns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from sim.model.memory import MAX_GPU_BLOCKS

class FrozenModel(BaseModel):
    """The base of the scenario's sections: unknown keys refused, values immutable, no coercion."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


#: Longest sequence, in tokens: above the longest context window of any released model (10M).
MAX_TOKENS = 1 << 24
#: Most sessions (arrivals) of one run; a run holds every request in memory.
MAX_SESSIONS = 2_000_000
#: Most requests of one run (sessions times their turns).
MAX_REQUESTS = 4_000_000
#: Longest simulated span of arrivals, in seconds (one year).
MAX_DURATION_S = 365 * 86400.0
#: Largest memory size in bytes anywhere (1 PiB: more than any machine's).
MAX_BYTES = 1 << 50


@dataclass(frozen=True)
class Limit:
    key: str
    max: float
    why: str
    min: float | None = None  # a floor above the schema's own (> 0 or >= 0) bound


_TABLE = (
    Limit("seed", 2**63 - 1, "a 64-bit seed"),
    Limit("engine.max_model_len", MAX_TOKENS, "longer than any model's context"),
    Limit("engine.kv_quant_group_size", 1 << 16, "elements per scale"),
    Limit("engine.api_servers", 256, "front-end processes (CPU cores)"),
    Limit("engine.activation_peak_bytes", MAX_BYTES, "1 PiB"),
    Limit("engine.runtime_overhead_bytes", MAX_BYTES, "1 PiB"),
    Limit("engine.num_gpu_blocks_override", MAX_GPU_BLOCKS, "the allocator keeps objects per block"),
    Limit("engine.profile_overrides.max_graph_size", 1 << 16, "batch sizes a graph is captured for"),
    Limit("engine.profile_overrides.scheduler_steps", 64, "decode steps a scheduling round runs"),
    Limit("engine.profile_overrides.step_host_s", 10.0, "seconds of host time per step"),
    Limit("engine.profile_overrides.seq_host_s", 1.0, "seconds of host time per sequence"),
    Limit("engine.profile_overrides.exposed_step_host_s", 10.0, "seconds of host time per step"),
    Limit("engine.profile_overrides.exposed_seq_host_s", 1.0, "seconds of host time per sequence"),
    Limit("engine.profile_overrides.exposed_kv_token_host_s", 1e-3, "seconds of host time per KV token"),
    Limit("engine.profile_overrides.graph_kernel_s", 1e-3, "seconds of GPU time per replayed kernel"),
    Limit("engine.profile_overrides.frontend_request_s", 60.0, "seconds per request"),
    Limit("engine.profile_overrides.frontend_prompt_token_s", 1.0, "seconds per prompt token"),
    Limit("engine.profile_overrides.frontend_token_s", 1.0, "seconds per output token"),
    Limit("engine.profile_overrides.frontend_chat_request_s", 60.0, "seconds per request"),
    Limit("engine.profile_overrides.custom_allreduce_max_bytes", 1e12, "bytes of one all-reduce message"),
    Limit("kv.block_size", 1 << 16, "tokens per block"),
    Limit("kv.token_eviction.window_tokens", MAX_TOKENS, "as engine.max_model_len"),
    Limit("kv.token_eviction.sink_tokens", MAX_TOKENS, "as engine.max_model_len"),
    Limit("kv.token_eviction.heavy_tokens", MAX_TOKENS, "as engine.max_model_len"),
    Limit("kv.swap_space_gb", 1 << 20, "1 PiB of host memory"),
    Limit("kv.offload.capacity_gb", 1 << 20, "1 PiB of host memory"),
    Limit("kv.offload.capacity_tokens", 1 << 40, "tokens of KV in host memory"),
    Limit("kv.offload.bandwidth_gb_per_s", 1e5, "GB/s of host link"),
    Limit("kv.offload.latency_s", 1.0, "seconds per transfer"),
    Limit("kv.offload.write_bandwidth_gb_per_s", 1e5, "GB/s of disk writes"),
    Limit("engine.host_memory_gb", 1 << 20, "1 PiB of host memory"),
    Limit("scheduler.max_num_seqs", 1 << 20, "more than any engine runs at once"),
    Limit("scheduler.max_num_batched_tokens", MAX_TOKENS, "as engine.max_model_len"),
    Limit("scheduler.long_prefill_token_threshold", MAX_TOKENS, "as engine.max_model_len"),
    Limit("workload.num_requests", MAX_SESSIONS, "a run holds every request in memory"),
    Limit("workload.duration_s", MAX_DURATION_S, "one year of arrivals"),
    Limit("workload.arrival.rate", 1e6, "requests per second", min=1e-6),
    Limit("workload.arrival.cv", 100.0, "burstiness", min=1e-3),
    Limit("workload.arrival.concurrency", MAX_SESSIONS, "closed-loop clients, each a session"),
    Limit("workload.arrival.think_time_s", 1e6, "about 12 days"),
    Limit("workload.trace.speedup", 1e6, "replay speed", min=1e-6),
    Limit("workload.max_tokens", MAX_TOKENS, "as engine.max_model_len"),
    Limit("<length>.value", MAX_TOKENS, "as engine.max_model_len"),
    Limit("<length>.low", MAX_TOKENS, "as engine.max_model_len"),
    Limit("<length>.high", MAX_TOKENS, "as engine.max_model_len"),
    Limit("<length>.min", MAX_TOKENS, "as engine.max_model_len"),
    Limit("<length>.max", MAX_TOKENS, "as engine.max_model_len"),
    Limit("<length>.median", MAX_TOKENS, "as engine.max_model_len"),
    Limit("<length>.sigma", 10.0, "exp(10 sigma) already spans every length"),
    Limit("<length>.a", 20.0, "a Zipf exponent"),
    Limit("<zipf>.max", 1 << 20, "the Zipf support is held in memory"),
    Limit("workload.shared_prefix.num_prefixes", 1 << 20, "prefixes are held in memory"),
    Limit("workload.shared_prefix.prefix_tokens", MAX_TOKENS, "as engine.max_model_len"),
    Limit("workload.shared_prefix.zipf_a", 100.0, "a Zipf exponent"),
    Limit("workload.conversation.think_time_s", 1e6, "about 12 days"),
    Limit("slo.ttft_s", 1e6, "about 12 days"),
    Limit("slo.tpot_s", 1e6, "about 12 days"),
    Limit("cluster.num_replicas", 256, "each replica keeps its own KV pool and step log"),
    Limit("cluster.prefix_load_factor", 1e6, "times the mean outstanding requests"),
)

#: key (as docs/reference/scenario.md writes it) -> its Limit
LIMITS: dict[str, Limit] = {lim.key: lim for lim in _TABLE}

_LENGTH_KEYS = ("workload.prompt_tokens.", "workload.output_tokens.", "workload.conversation.turns.")


def limits_for(key_path: str) -> list[Limit]:
    """The Limits a user's key path may have (``workload.prompt_tokens.median`` ->
    ``<length>.median``; a length's ``max`` also ``<zipf>.max``)."""
    for prefix in _LENGTH_KEYS:
        if key_path.startswith(prefix):
            name = key_path[len(prefix):]
            return [LIMITS[k] for k in (f"<length>.{name}", f"<zipf>.{name}") if k in LIMITS]
    if key_path.startswith("kv.offload.") and key_path[11:12].isdigit():  # a tier of the list form
        key_path = "kv.offload." + key_path[11:].partition(".")[2]
    return [LIMITS[key_path]] if key_path in LIMITS else []


def _bound(key: str, gt: float | None, ge: float | None, *, finite: bool) -> Field:
    lim = LIMITS[key]
    if lim.min is not None:
        gt, ge = None, lim.min
    if finite:
        return Field(gt=gt, ge=ge, le=lim.max, allow_inf_nan=False)
    return Field(gt=gt, ge=ge, le=lim.max)


def pos_int(key: str):
    """An int > 0 and <= the key's ceiling."""
    return Annotated[int, _bound(key, 0, None, finite=False)]


def nonneg_int(key: str):
    return Annotated[int, _bound(key, None, 0, finite=False)]


def pos_float(key: str):
    """A finite float > 0 (or >= the key's floor) and <= the key's ceiling."""
    return Annotated[float, _bound(key, 0, None, finite=True)]


def nonneg_float(key: str):
    return Annotated[float, _bound(key, None, 0, finite=True)]


def ceiling_message(key_path: str, value, kind: str, bound) -> str | None:
    """The message for a value past a bound of the table, or None if ``key_path`` has none."""
    found = limits_for(key_path)
    lim = next((x for x in found if bound in (x.max, x.min)), found[0] if found else None)
    if lim is None:
        return None
    if kind == "less_than_equal":
        return f"{value!r} is above the ceiling {lim.max:g} ({lim.why}); allowed: <= {lim.max:g}"
    if lim.min is not None and kind == "greater_than_equal":
        return f"{value!r} is below the floor {lim.min:g}; allowed: {lim.min:g} to {lim.max:g}"
    return None

"""Per-step and per-request records, and the run summary built from them.

KV memory is broken down as in the PagedAttention paper (Fig. 2), in token slots of the
pool, each step, after the step's tokens are computed. For every request holding KV,
with ``held`` slots, ``computed`` tokens and ``final`` tokens once done (the true length,
known to the metrics only):

* *tokens*: slots holding real KV (each physical slot once, shared prefix blocks too;
  under a token budget ``computed`` and ``final`` count kept tokens only);
* *reserved*: ``min(held, final) - computed``: slots the request will fill later;
* *internal fragmentation*: ``max(0, held - final)``: slots it holds but never fills;
* *external fragmentation*: free slots outside the largest free hole (contiguous only);
* *free*: the rest, including evictable prefix-cache blocks (reported separately too).

``tokens + reserved + internal + external + free == pool`` each step; fractions of the
pool are averaged over busy time (weighted by step duration).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.config.engine_support import engine_notes
from sim.engine.logs.profile_info import engine_summary, profile_notes
from sim.engine.logs.request_stats import RunRequests
from sim.engine.host_memory import host_plan
from sim.engine.logs.tier_summary import tier_summary
from sim.engine.logs.step_log import COLUMNS, StepLog, step_aggregates  # noqa: F401 (re-exported)
from sim.kv.base import KVAllocator
from sim.request import RequestStatus
from sim.model.dtypes import embedding_dtype

#: The percentiles summary.json gives of TTFT, TPOT, ITL and E2E: key -> percentile (numpy's
#: ``percentile``, linear between samples). ``p999`` is p99.9 (a dot would split the key's path).
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
#: The keys of each latency's statistics, in summary.json's order.
STAT_KEYS = ("mean", *PERCENTILES)


def stat_label(key: str) -> str:
    """How a statistic's key is shown: ``p999`` is ``p99.9``."""
    return "p99.9" if key == "p999" else key


def _stats(values) -> dict[str, float | None]:
    if not len(values):
        return dict.fromkeys(STAT_KEYS)
    a = np.asarray(values, dtype=float)
    qs = np.percentile(a, list(PERCENTILES.values()))
    return {"mean": float(a.mean()), **{k: float(q) for k, q in zip(PERCENTILES, qs)}}


def itl_stats(itl) -> dict[str, float | None]:
    """summary.json's ``itl_s`` from a run's ItlLog (sim/engine/logs/itl.py); all None without one."""
    return dict.fromkeys(STAT_KEYS) if itl is None else itl.stats(PERCENTILES)


def request_latencies(req) -> tuple[float | None, float | None, float | None]:
    """(ttft_s, tpot_s, e2e_s) of a finished request as its client sees them; None where
    undefined. With a modelled front end the client's times are when the tokens were
    streamed (``client_first_s``, ``client_last_s``); else the engine's."""
    if req.finish_s is None:
        return None, None, None
    if req.client_last_s is not None:
        first, last = req.client_first_s, req.client_last_s
        tpot = (last - first) / (req.num_output_tokens - 1) if req.num_output_tokens > 1 else None
        return first - req.arrival_s, tpot, last - req.arrival_s
    ttft = req.first_token_s - req.arrival_s
    tpot = None
    if req.num_output_tokens > 1:
        tpot = (req.last_token_s - req.first_token_s) / (req.num_output_tokens - 1)
    return ttft, tpot, req.finish_s - req.arrival_s


def _tokens_evicted(rr: RunRequests, allocator: KVAllocator) -> int:
    """Tokens a token budget dropped from the finished requests (0 without a budget)."""
    if allocator.budget.max_tokens is None:
        return 0
    kept = allocator.kept_tokens
    return sum(c - kept(c) for c in rr.c["num_computed_tokens"][rr.done].astype(int).tolist())


def preemption_counters(result) -> dict:
    p = result.preemptor
    return {
        "recompute": p.num_recompute, "swap": p.num_swap,
        # Every preemption here has one cause: a running request could not grow its KV.
        "by_cause": {"kv_growth": p.num_recompute + p.num_swap},
        "swap_fallback_to_recompute": p.num_swap_fallbacks,
        "recomputed_tokens": p.num_recomputed_tokens,
        "swap_out_bytes": p.swap_out_bytes, "swap_in_bytes": p.swap_in_bytes,
        "swap_peak_bytes": result.swap.peak_used_bytes,
    }


def notes(allocator: KVAllocator) -> list[str]:
    """Caveats a reader of this run must know."""
    out = []
    if allocator.budget.max_tokens is not None:
        out.append(f"token-level KV eviction '{allocator.budget.policy}' bounds memory and "
                   "attention reads; its effect on output quality is not simulated")
    return out


def memory_summary(sc, plan) -> dict:
    """Where one GPU's memory goes (the memory plan, sim/model/memory.py): the budget
    (gpu_memory_utilization x gpu_memory_bytes) = weights + activation peak + runtime overhead +
    KV pool, in bytes; a pipeline-parallel replica's figures are its binding stage's, a cluster's
    its first replica's. ``attention_ranks``: the GPUs whose pools the engine's blocks add up
    (engine.attention_data_parallel), else 1."""
    eng = sc.engine
    return {
        "gpu_memory_bytes": plan.gpu_memory_bytes, "gpu_memory_utilization": plan.gpu_memory_utilization,
        "weight_dtype": str(eng.weight_dtype), "embedding_dtype": embedding_dtype(eng.weight_dtype, eng.embedding_dtype),
        "kv_dtype": str(eng.kv_dtype), "weight_bytes": plan.weight_bytes,
        "activation_peak_bytes": plan.activation_peak_bytes, "runtime_overhead_bytes": plan.runtime_overhead_bytes,
        "kv_pool_bytes": plan.kv_pool_bytes, "attention_ranks": plan.attention_ranks,
        "kv_cache_free_gpu_mem_fraction": plan.kv_free_memory_fraction,
        **(host_plan(sc, plan.bytes_per_block, plan.block_size) or {}),  # with kv.offload: the host's bytes
    }


#: A front end busier than this is named in the run's notes: it, not the GPU, paces the clients
FRONTEND_BUSY_NOTE = 0.9


def frontend_busy_share(frontend, span_s: float) -> float | None:
    """The share of the run its front-end CPUs were busy (all of them together), None without one."""
    if frontend is None or span_s <= 0:
        return None
    return frontend.busy_s / (span_s * frontend.servers)


def frontend_note(share: float | None) -> list[str]:
    if share is None or share < FRONTEND_BUSY_NOTE:
        return []
    return [f"the front end was busy {share:.0%} of the run: it paces the clients' tokens (their TTFT, TPOT and "
            "throughput), not the GPU; raise engine.api_servers or lower profile_overrides.frontend_token_s"]


#: An open-loop run is called overloaded when it served less than this share of the offered rate
#: and its queue peaked at OVERLOAD_QUEUE_SHARE of the requests or more (its latencies then grow with
#: the run's length: they are a property of the run, not of the server)
OVERLOAD_SERVED_SHARE, OVERLOAD_QUEUE_SHARE = 0.9, 0.1


def overload_note(sc, rr, span_s: float, peak_waiting: int, ttft_p50: float | None) -> list[str]:
    arrival = getattr(getattr(sc.workload, "arrival", None), "type", None)
    arrivals = rr.c["arrival_s"]
    if arrival in ("offline", "closed") or rr.n < 20 or span_s <= 0 or rr.num_done + rr.num_rejected < rr.n:
        # (stranded requests: stranded_note says why the served rate is low)
        return []  # a batch job or closed clients: the queue cannot outgrow the server
    window = float(arrivals.max() - arrivals.min())
    if window <= 0:
        return []
    offered, served = (rr.n - 1) / window, rr.num_done / span_s
    if served >= OVERLOAD_SERVED_SHARE * offered or peak_waiting < max(10, OVERLOAD_QUEUE_SHARE * rr.n):
        return []
    ttft = "" if ttft_p50 is None else f", p50 TTFT {ttft_p50:,.1f} s"
    return [f"overloaded: requests arrived at {offered:.2f} req/s, the engine served {served:.2f} req/s; the queue "
            f"peaked at {peak_waiting:,} waiting{ttft}, and its latencies grow with the run's length. Lower the "
            "rate, or find a configuration that serves it: sim plan"]


#: The states a request left unfinished at the end of a run can be in.
STRANDED = (RequestStatus.WAITING, RequestStatus.RUNNING, RequestStatus.SWAPPED)


def trace_prefix_note(sc) -> list[str]:
    """A trace without a prefix identity gives prefix caching nothing to find."""
    trace = sc.workload.trace
    if trace is None or not sc.kv.prefix_caching:
        return []
    from sim.workload.trace import has_prefix_identity  # noqa: PLC0415

    if has_prefix_identity(str(sc.resolve(trace.path))):
        return []
    return [f"the trace {Path(trace.path).name} has no prefix identity (columns prefix_group, prefix_tokens): no two "
            "of its requests share a prefix, so prefix caching (and its eviction policy, and an offload tier) finds "
            "nothing to reuse here; add the columns to replay shared system prompts or conversations"]


def stranded_note(rr) -> list[str]:
    """A run ends when no event is left: a request neither finished nor rejected by then was
    stranded (the engine, or a cluster's pools, stopped with its work left: a deadlock)."""
    left = rr.n - rr.num_done - rr.num_rejected
    if left <= 0:
        return []
    by = ", ".join(f"{int(rr.status_is(st).sum()):,} {st.value}" for st in STRANDED if rr.status_is(st).any())
    return [f"stranded: {left:,} of {rr.n:,} requests neither finished nor were rejected ({by}): the simulation ran "
            "out of events with their work left, a deadlock in the simulated engine. Their rows in requests.csv "
            "have no finish time; please report the scenario"]


def summarize(result) -> dict:
    """The ``summary.json`` document of a finished run."""
    sc, plan = result.scenario, result.plan
    rr = RunRequests(result.requests, ("num_computed_tokens",))
    span = result.end_s if result.end_s > 0 else 1.0
    good = rr.meets(sc.slo.ttft_s, sc.slo.tpot_s)
    out_tokens = rr.done_sum("num_output_tokens")
    pool = plan.num_gpu_blocks * plan.block_size
    agg = step_aggregates(result.steps, pool)  # sums over the log's pieces (it may be on disk)
    busy = float(agg["busy"])
    fe_share = frontend_busy_share(result.frontend, span)
    ttft = _stats(rr.done_ttft())

    def mean_frac(key: str) -> float:
        return float(agg[key] / busy / pool) if busy > 0 else 0.0

    alloc_busy = float(agg["alloc"])
    alloc_cls = result.allocator
    cache = alloc_cls.prefix_cache_stats()
    tier = tier_summary(sc, alloc_cls, span)  # None without kv.offload: no section
    return {
        "scenario": sc.name,
        "model": sc.model,
        "gpu": result.calibration_name,
        "calibration_source": result.calibration_source,
        "calibration_label": result.calibration_label or result.calibration_source,
        "policies": {
            "allocator": str(sc.kv.allocator), "prefix_caching": sc.kv.prefix_caching,
            "block_size": sc.kv.block_size, "batching": str(sc.scheduler.policy),
            "preemption": str(sc.scheduler.preemption), "when_kv_full": str(sc.scheduler.when_kv_full),
            "preemption_victim": str(sc.scheduler.preemption_victim),
            "watermark": sc.scheduler.watermark,
            "prefix_cache_eviction": str(sc.kv.prefix_cache_eviction),
            "token_eviction": str(alloc_cls.budget.policy),
        },
        "profile": engine_summary(result),
        "notes": engine_notes(sc) + notes(alloc_cls) + profile_notes(result) + frontend_note(fe_share)
        + overload_note(sc, rr, span, int(agg["peak_waiting"]), ttft["p50"]) + stranded_note(rr)
        + trace_prefix_note(sc),
        "requests": {
            "arrived": rr.n, "completed": rr.num_done, "rejected": rr.num_rejected,
            "in_flight": rr.n - rr.num_done - rr.num_rejected, "rejected_by_reason": rr.rejected_by_reason,
        },
        "ttft_s": ttft,
        "tpot_s": _stats(rr.done_tpot()),
        # every gap between two tokens of a request (sim/engine/logs/itl.py: 0.05% bins)
        "itl_s": itl_stats(getattr(result, "itl", None)),
        "e2e_s": _stats(rr.done_e2e()),
        "throughput": {
            "requests_per_s": rr.num_done / span,
            "output_tokens_per_s": out_tokens / span,
            "total_tokens_per_s": (out_tokens + rr.done_sum("num_prompt_tokens")) / span,
        },
        "goodput_requests_per_s": good / span,
        "slo": {"ttft_s": sc.slo.ttft_s, "tpot_s": sc.slo.tpot_s, "attained_fraction": good / rr.num_done if rr.num_done else None},
        "kv": {
            "pool_tokens": pool,
            "pool_bytes": plan.num_gpu_blocks * plan.bytes_per_block,
            "num_gpu_blocks": plan.num_gpu_blocks,
            "bytes_per_token": plan.bytes_per_token,
            "max_full_length_seqs": plan.max_full_length_seqs,
            "peak_used_fraction": agg["peak_alloc"] / pool,
            "peak_token_fraction": agg["peak_token"] / pool,
            "mean_token_fraction": mean_frac("token"),
            "mean_reserved_unused_fraction": mean_frac("reserved"),
            "mean_internal_fragmentation_fraction": mean_frac("internal"),
            "mean_external_fragmentation_fraction": mean_frac("external"),
            "mean_free_fraction": mean_frac("free"),
            "mean_allocated_unused_fraction": (
                float(agg["alloc_unused"] / alloc_busy) if alloc_busy > 0 else 0.0),
            "prefix_cache_hit_rate": cache.hit_rate,
            "prefix_cache_hit_tokens": cache.hit_tokens,
            "prefill_tokens_saved": cache.hit_tokens,
            "prefix_cache_evictions": cache.evictions,
            "token_eviction": str(alloc_cls.budget.policy),
            "max_kv_tokens_per_request": plan.max_kv_tokens_per_seq,
            "tokens_evicted": _tokens_evicted(rr, alloc_cls),
        },
        **({"kv_offload": tier} if tier is not None else {}),
        "memory": memory_summary(sc, plan),
        "preemptions": preemption_counters(result),
        "engine": {
            "num_steps": agg["num_steps"], "busy_s": busy, "simulated_s": result.end_s,
            "peak_running": agg["peak_running"], "peak_waiting": agg["peak_waiting"],
            "frontend_busy_share": fe_share,
            "gpus": sc.engine.tensor_parallel_size * sc.engine.pipeline_parallel_size,  # one model copy
        },
        "sim_wall_s": result.sim_wall_s,
    }

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

from array import array
from collections.abc import Sequence

import numpy as np

from sim.engine.profile_info import engine_summary, profile_notes
from sim.kv.base import KVAllocator

COLUMNS = (
    "time_s", "duration_s", "num_seqs", "num_prefill_tokens", "num_decode_tokens",
    "num_padding_tokens", "num_waiting", "num_running", "num_swapped", "num_preempted",
    "swap_bytes", "kv_token_slots", "kv_allocated_slots", "kv_reserved_slots",
    "kv_internal_frag_slots", "kv_external_frag_slots", "kv_cached_free_slots",
)


_NCOLS = len(COLUMNS)
#: Kept as doubles: the two times, and swap_bytes (a step may move more than 2**31 bytes);
#: the rest are counts.
_FLOAT_COLS = (0, 1, 10)
_COUNT_COLS = tuple(i for i in range(_NCOLS) if i not in _FLOAT_COLS)


class _Rows(Sequence):
    """A read-only view of a :class:`StepLog` as one tuple per step (as the log was once
    kept): ``rows[-1]``, ``len(rows)``, iteration. Counts come back as ints."""

    def __init__(self, log: StepLog) -> None:
        self._log = log

    def __len__(self) -> int:
        return len(self._log)

    def __getitem__(self, i):
        n = len(self)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("step index out of range")
        return self._log.row(i)


class StepLog:
    """Columns of per-step numbers, appended as the run goes: the two times and swap_bytes
    as doubles, the 14 counts as 32-bit integers (64-bit if the KV pool has 2**31 slots or
    more): 80 bytes a step. ``table`` and ``array`` give them back as numbers of either
    kind (a count's value is exact)."""

    def __init__(self) -> None:
        self._f = array("d")  # per step: time_s, duration_s, swap_bytes
        self._c = array("i")  # per step: the counts, COLUMNS order (made "q" for huge pools)

    def __len__(self) -> int:
        return len(self._f) // 3

    @property
    def rows(self) -> _Rows:
        """The steps as tuples (a view; see :class:`_Rows`)."""
        return _Rows(self)

    def row(self, i: int) -> tuple:  # COLUMNS order, counts as ints
        f = self._f[3 * i:3 * i + 3]
        c = self._c[14 * i:14 * i + 14]
        return (f[0], f[1], *c[:8], int(f[2]), *c[8:])

    def append(self, now, duration, num_seqs, num_prefill, num_decode, padding, waiting, running,
               swapped, preempted, swap_bytes, token_slots, allocated, reserved, internal, external,
               cached_free) -> None:
        """One step's row (COLUMNS order)."""
        counts = (num_seqs, num_prefill, num_decode, padding, waiting, running, swapped, preempted,
                  token_slots, allocated, reserved, internal, external, cached_free)
        try:
            self._c.extend(counts)
        except OverflowError:  # a pool of 2**31 slots or more: 64-bit counts from now on
            self._c = array("q", self._c[:14 * len(self)])
            self._c.extend(counts)
        self._f.extend((now, duration, swap_bytes))

    def record(self, now: float, duration: float, out, sched, allocator: KVAllocator) -> None:
        reserved = internal = empty = 0
        kept = allocator.kept_tokens
        bounded = allocator.budget.max_tokens is not None
        for req in sched.running:
            held = allocator.held_slots(req)
            computed = req.num_computed_tokens
            final = req.final_num_tokens
            if bounded:  # a token budget: only kept tokens hold KV
                computed, final = kept(computed), kept(final)
            filled_to = held if held < final else final
            reserved += filled_to - computed
            internal += held - filled_to
            empty += held - computed
        for req in getattr(sched, "done_in_batch", ()):  # static batch padding rows
            waste = allocator.held_slots(req) - kept(req.num_computed_tokens)
            internal += waste
            empty += waste
        allocated = allocator.num_allocated_slots()
        self.append(
            now, duration, out.num_seqs, out.num_prefill_tokens, out.num_decode_tokens,
            out.prefill_padding_tokens + out.decode_padding_seqs, len(sched.waiting),
            len(sched.running), len(sched.swapped), len(out.preempted),
            out.swap_out_bytes + out.swap_in_bytes, allocated - empty, allocated, reserved,
            internal, allocator.num_external_fragmentation_slots(),
            allocator.num_cached_free_slots(),
        )

    def _views(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        n = len(self)
        stop = n if stop is None else min(stop, n)
        f = np.frombuffer(self._f, dtype=float).reshape(-1, 3)[start:stop]
        c = np.frombuffer(self._c, dtype=np.int32 if self._c.typecode == "i" else np.int64)
        return f, c.reshape(-1, 14)[start:stop]

    def table(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Steps ``start`` to ``stop`` as a (steps x columns) float array (a copy: the log
        may grow on)."""
        f, c = self._views(start, stop)
        out = np.empty((len(f), _NCOLS), dtype=float)
        out[:, _FLOAT_COLS] = f
        out[:, _COUNT_COLS] = c
        return out

    def array(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Each column as an array: float for the times and swap_bytes, integer for the
        counts. With ``copy`` False, views of the log itself (no memory; for a finished run
        only: the log cannot grow while such a view is alive)."""
        f, c = self._views()
        if copy:
            f, c = f.copy(), c.copy()
        cols = {COLUMNS[j]: f[:, k] for k, j in enumerate(_FLOAT_COLS)}
        cols.update({COLUMNS[j]: c[:, k] for k, j in enumerate(_COUNT_COLS)})
        return {name: cols[name] for name in COLUMNS}

    def sample_stride(self, max_rows: int | None) -> int:
        """A sampled ``steps.csv`` keeps every k-th step from the first: k = 1 when the log
        has at most ``max_rows`` steps (or ``max_rows`` is None), else ceil(n / max_rows)."""
        n = len(self)
        return 1 if max_rows is None or n <= max_rows else -(-n // max_rows)

    def sample_indices(self, max_rows: int | None) -> np.ndarray:
        """The steps a sampled ``steps.csv`` keeps (see :meth:`sample_stride`)."""
        return np.arange(0, len(self), self.sample_stride(max_rows))


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


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


def summarize(result) -> dict:
    """The ``summary.json`` document of a finished run."""
    sc, plan, reqs = result.scenario, result.plan, result.requests
    done = [r for r in reqs if r.finish_s is not None]
    rejected = [r for r in reqs if r.reject_reason is not None]
    reasons: dict[str, int] = {}
    for r in rejected:
        reasons[r.reject_reason] = reasons.get(r.reject_reason, 0) + 1
    lat = [request_latencies(r) for r in done]
    ttft = [t for t, _, _ in lat]
    tpot = [t for _, t, _ in lat if t is not None]
    e2e = [e for _, _, e in lat]
    span = result.end_s if result.end_s > 0 else 1.0
    good = sum(1 for t, p, _ in lat if t <= sc.slo.ttft_s and (p is None or p <= sc.slo.tpot_s))
    out_tokens = sum(r.num_output_tokens for r in done)
    steps = result.steps.array(copy=False)  # the run is over: no copy of a long log
    pool = plan.num_gpu_blocks * plan.block_size
    dur = steps["duration_s"]
    busy = float(dur.sum())

    def mean_frac(col: np.ndarray) -> float:
        return float((col * dur).sum() / busy / pool) if busy > 0 else 0.0

    token, alloc = steps["kv_token_slots"], steps["kv_allocated_slots"]
    external = steps["kv_external_frag_slots"]
    alloc_busy = float((alloc * dur).sum())
    alloc_cls = result.allocator
    cache = alloc_cls.prefix_cache_stats()
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
        "notes": notes(alloc_cls) + profile_notes(result),
        "requests": {
            "arrived": len(reqs), "completed": len(done), "rejected": len(rejected),
            "in_flight": len(reqs) - len(done) - len(rejected), "rejected_by_reason": reasons,
        },
        "ttft_s": _stats(ttft),
        "tpot_s": _stats(tpot),
        "e2e_s": _stats(e2e),
        "throughput": {
            "requests_per_s": len(done) / span,
            "output_tokens_per_s": out_tokens / span,
            "total_tokens_per_s": (out_tokens + sum(r.num_prompt_tokens for r in done)) / span,
        },
        "goodput_requests_per_s": good / span,
        "slo": {"ttft_s": sc.slo.ttft_s, "tpot_s": sc.slo.tpot_s, "attained_fraction": good / len(done) if done else None},
        "kv": {
            "pool_tokens": pool,
            "pool_bytes": plan.num_gpu_blocks * plan.bytes_per_block,
            "num_gpu_blocks": plan.num_gpu_blocks,
            "bytes_per_token": plan.bytes_per_token,
            "max_full_length_seqs": plan.max_full_length_seqs,
            "peak_used_fraction": float(alloc.max() / pool) if alloc.size else 0.0,
            "peak_token_fraction": float(token.max() / pool) if token.size else 0.0,
            "mean_token_fraction": mean_frac(token),
            "mean_reserved_unused_fraction": mean_frac(steps["kv_reserved_slots"]),
            "mean_internal_fragmentation_fraction": mean_frac(steps["kv_internal_frag_slots"]),
            "mean_external_fragmentation_fraction": mean_frac(external),
            "mean_free_fraction": mean_frac(pool - alloc - external),
            "mean_allocated_unused_fraction": (
                float(((alloc - token) * dur).sum() / alloc_busy) if alloc_busy > 0 else 0.0),
            "prefix_cache_hit_rate": cache.hit_rate,
            "prefix_cache_hit_tokens": cache.hit_tokens,
            "prefill_tokens_saved": cache.hit_tokens,
            "prefix_cache_evictions": cache.evictions,
            "token_eviction": str(alloc_cls.budget.policy),
            "max_kv_tokens_per_request": plan.max_kv_tokens_per_seq,
            "tokens_evicted": sum(
                r.num_computed_tokens - alloc_cls.kept_tokens(r.num_computed_tokens) for r in done),
        },
        "preemptions": preemption_counters(result),
        "engine": {
            "num_steps": len(dur), "busy_s": busy, "simulated_s": result.end_s,
            "peak_running": int(steps["num_running"].max()) if dur.size else 0,
            "peak_waiting": int(steps["num_waiting"].max()) if dur.size else 0,
        },
        "sim_wall_s": result.sim_wall_s,
    }

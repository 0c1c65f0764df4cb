"""Timing one kernel launch: the median of many, warm caches excluded, compile excluded.

A case hands the timer a list of callables that do the same work on different copies of
the inputs; the timer calls them in rotation so that, when the copies together exceed
twice the last-level cache (L2 on a GPU, L3 on a CPU), no launch finds its inputs cached.

- CUDA: one untimed call first (Triton JIT-compiles on it), then
  ``triton.testing.do_bench`` (warm-up, L2 flushed before each run, CUDA events, the
  median and the 20th/80th percentiles).
- CPU: untimed warm-up calls (every copy at least once), then ``time.perf_counter`` around each call until
  ``min_time_s`` and ``min_repeats`` are both reached; torch CPU ops return when their
  work is done, so the clock brackets the work itself. The thread count is recorded by
  the caller (``torch.get_num_threads()``).
- Whole engine steps (``forward`` cases, either device): ``time_cpu`` on one copy (the
  model's weights are the working set), ``time.perf_counter`` around each step, which
  synchronizes as the validation engine's does. Steps timed back to back matched the
  engine's lockstep steps better than steps timed in turns with other batches (MAPE 3.0%
  against 6.8% over the same 1,433 steps on the dev CPU): an engine's batch changes
  little from one step to the next.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Timing:
    median_s: float
    p20_s: float
    p80_s: float
    repeats: int


def rotation_copies(bytes_each: int, cache_bytes: int, *, max_copies: int = 256,
                    max_total_bytes: int = 4 << 30) -> int:
    """How many input copies make a rotation exceed twice the cache (bounded in count and bytes)."""
    want = math.ceil(2 * cache_bytes / max(1, bytes_each))
    fit = max(1, max_total_bytes // max(1, bytes_each))
    return int(max(1, min(max_copies, want, fit)))


def cpu_cache_bytes() -> int:
    """The largest CPU cache (L3 usually) from sysfs; 32 MiB when unknown."""
    sizes = []
    for p in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = p.read_text().strip().upper()
        mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KM")) * mult)
        except ValueError:
            pass
    return max(sizes, default=32 << 20)


def _quantiles(samples: list[float]) -> Timing:
    s = sorted(samples)
    q = statistics.quantiles(s, n=5, method="inclusive") if len(s) > 1 else [s[0]] * 4
    return Timing(statistics.median(s), q[0], q[3], len(s))


def time_cpu(fns: list, *, warmup: int = 2, min_repeats: int = 5, min_time_s: float = 0.05,
             max_repeats: int = 200) -> Timing:
    """Median seconds of one call, calling ``fns`` in rotation (see module docstring).

    The warm-up calls every copy at least once: the first call on a tensor can pay one-time
    costs (oneDNN packs a bf16 weight on first use: 8 ms instead of 0.2 ms measured on a
    2-core EPYC) that an engine, whose weights persist, never pays per step.
    """
    for i in range(max(warmup, len(fns))):
        fns[i % len(fns)]()
    samples: list[float] = []
    start = time.perf_counter()
    i = 0
    while len(samples) < max_repeats and (len(samples) < min_repeats or time.perf_counter() - start < min_time_s):
        fn = fns[i % len(fns)]
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        i += 1
    return _quantiles(samples)


def time_after_idle(fn, idle_s: float, *, warmup: int = 1, repeats: int = 5) -> Timing:
    """Median seconds of ``fn`` when each call follows ``idle_s`` of sleep (an engine's
    first step after a lull), the sleep itself untimed."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        time.sleep(idle_s)
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return _quantiles(samples)


def time_cuda(fns: list, *, warmup_ms: int = 25, rep_ms: int = 100) -> Timing:
    """Median seconds of one launch on the current CUDA device via triton.testing.do_bench."""
    import torch  # noqa: PLC0415
    from triton.testing import do_bench  # noqa: PLC0415

    for fn in fns[:1]:
        fn()  # compile (Triton JIT, cuBLAS heuristics) outside the timed region
    torch.cuda.synchronize()
    state = {"i": 0}

    def step():
        fns[state["i"] % len(fns)]()
        state["i"] += 1

    med, p20, p80 = do_bench(step, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return Timing(med * 1e-3, p20 * 1e-3, p80 * 1e-3, max(1, int(rep_ms / max(med, 1e-3))))


def time_host_copy_cuda(fns: list, *, repeats: int = 20) -> Timing:
    """Host<->device copies: CUDA events around each synchronized copy (do_bench's L2 flush
    does not apply to host memory); the median of ``repeats`` after one warm-up."""
    import torch  # noqa: PLC0415

    fns[0]()
    torch.cuda.synchronize()
    samples = []
    for i in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fns[i % len(fns)]()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    return _quantiles(samples)

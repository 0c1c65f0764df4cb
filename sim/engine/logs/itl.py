"""Inter-token latency (ITL): the gaps between consecutive tokens of a request, over every token.

TPOT is one figure per request, ``(last - first) / (n - 1)``; ITL is one per token after the
first: the time from a request's previous token to this one, as its client gets them (the
front end's streaming time where the profile models one, sim/engine/step/frontend.py; else
the end of the engine step that sampled it). A decode step stalled by a long prefill chunk,
a preemption (the next token comes after the recompute or the swap-in) or a disaggregated
hand-off (the second token waits for the KV transfer) is one long gap for each request in
it, which their TPOT averages away. vLLM's benchmark reports ITL the same way (mean, median,
p99 over all tokens), and ``sim serve``'s ``/metrics`` histogram observes the same gaps.

**The structure.** A million-request run makes about 10^8 tokens: storing every gap (800 MB)
or even one exact (gap, count) pair per engine step (7-9 M steps, ~100 MB) would break the
run's memory budget (~600 MB). Every token of a step reaches its clients at the same time,
so the gaps of a step are few distinct values: one per distinct previous delivery time,
nearly always one (every request in the batch had a token in the previous step), so
:meth:`ItlLog.tokens` groups them per step with one comparison per token and appends one
(gap, count) pair; a macro-step stretch (sim/engine/macro/run.py) appends one pair per inner
step without touching its decoding requests (``common``). Every :data:`FLUSH` pairs go into a
**log-binned histogram**: bin ``i`` holds the gaps in ``[BASE**i, BASE**(i+1))`` with ``BASE =
1.001`` (0.1% relative width); its keys and counts are a dict (about 9,200 bins span gaps from
1 ms to 10 s), the same size whatever the run's length. The pairs go in by whole pieces of
FLUSH, so their sum is the same float whether the run stepped one by one or in macro-steps.

**Its error.** The count and the mean are exact (the sum of every gap, up to float rounding).
A percentile is numpy's (linear between order statistics) with each order statistic
replaced by its bin's geometric middle, so it is within :data:`REL_ERROR` (0.05%)
of the exact percentile of the same gaps (a convex combination of two values each within
0.05%); tests/sim/engine/test_itl.py checks that bound against the exact figures on random
runs. Gaps under :data:`TINY` (none in practice: a step takes microseconds at least) count as 0.
"""

from __future__ import annotations

import math

import numpy as np

#: Each bin's upper edge over its lower one: 0.1% relative width.
BASE = 1.001
_LOG_BASE = math.log(BASE)
#: The largest relative error of a percentile (a bin's geometric middle against any gap in it).
REL_ERROR = math.sqrt(BASE) - 1.0
#: Gaps shorter than this (seconds) count as 0 (in bin ZERO).
TINY = 1e-12
ZERO = -(2**62)
#: (gap, count) pairs kept before they go into the histogram.
FLUSH = 4096


class ItlLog:
    """The inter-token gaps of one engine's requests: counts per log bin, their number and sum."""

    __slots__ = ("last", "gaps", "counts", "bins", "n", "sum_s")

    def __init__(self) -> None:
        self.last = math.nan  # when the latest tokens recorded were delivered
        self.gaps: list[float] = []  # not yet in ``bins``
        self.counts: list[int] = []
        self.bins: dict[int, int] = {}  # bin -> gaps in it
        self.n = 0  # gaps in ``bins``
        self.sum_s = 0.0  # their sum

    def tokens(self, at: float, sampled, common: int = 0) -> None:
        """``sampled`` (requests) each got a token delivered at ``at``: each one's gap since its
        previous token (none before its first); stamps ``token_s``. ``common`` more requests
        had their previous token at the latest delivery (a macro-step's decodes, stamped when
        its stretch ends). The gaps go in groups by the previous delivery, the latest first
        (the same pairs whatever the requests' order)."""
        last = self.last
        others = None
        for r in sampled:
            p = r.token_s
            r.token_s = at
            if p == last:
                common += 1
            elif p is not None:
                if others is None:
                    others = {}
                others[p] = others.get(p, 0) + 1
        self.last = at
        if common:
            self.gaps.append(at - last)
            self.counts.append(common)
        if others is not None:
            for p in sorted(others, reverse=True):
                self.gaps.append(at - p)
                self.counts.append(others[p])
        if len(self.gaps) >= FLUSH:
            self.flush()

    def flush(self, everything: bool = False) -> None:
        """Move the pending pairs into the histogram: each whole FLUSH of them (``everything``:
        the rest too, at the end). The sum goes by the same pieces of the same pairs however
        often this is called, so a run stepped one by one or in macro-steps has the same float."""
        gaps, counts = self.gaps, self.counts
        while len(gaps) >= FLUSH or (everything and gaps):
            self._bin(np.asarray(gaps[:FLUSH], dtype=float), np.asarray(counts[:FLUSH], dtype=np.int64))
            del gaps[:FLUSH]  # (in place: a macro-step stretch appends to them)
            del counts[:FLUSH]

    def _bin(self, g: np.ndarray, c: np.ndarray) -> None:
        self.n += int(c.sum())
        self.sum_s += float((g * c).sum())  # (numpy's pairwise sum: the same pairs, the same float)
        real = g >= TINY
        zeros = int(c[~real].sum())
        keys = np.floor(np.log(g[real]) / _LOG_BASE).astype(np.int64)
        bins = self.bins
        if keys.size:
            low = int(keys.min())
            sums = np.bincount(keys - low, weights=c[real])
            for k in np.flatnonzero(sums).tolist():
                bins[k + low] = bins.get(k + low, 0) + int(sums[k])
        if zeros:
            bins[ZERO] = bins.get(ZERO, 0) + zeros

    def add(self, other: ItlLog) -> None:
        """Count ``other``'s gaps too (a cluster's replicas into the whole cluster's)."""
        other.flush(True)
        self.flush(True)
        for k, v in other.bins.items():
            self.bins[k] = self.bins.get(k, 0) + v
        self.n += other.n
        self.sum_s += other.sum_s

    def stats(self, percentiles: dict[str, float]) -> dict[str, float | None]:
        """``mean`` and each of ``percentiles`` (key -> percentile) of the gaps; None without any."""
        self.flush(True)
        if not self.n:
            return {"mean": None, **dict.fromkeys(percentiles)}
        keys = np.array(sorted(self.bins), dtype=np.int64)
        counts = np.array([self.bins[k] for k in keys.tolist()], dtype=np.int64)
        cum = np.cumsum(counts)
        mids = np.where(keys == ZERO, 0.0, np.exp((keys.astype(float) + 0.5) * _LOG_BASE))

        def at_rank(j: int) -> float:  # the j-th smallest gap (0-based), as its bin's middle
            return float(mids[int(np.searchsorted(cum, j, side="right"))])

        out: dict[str, float | None] = {"mean": self.sum_s / self.n}
        for key, q in percentiles.items():
            h = (self.n - 1) * q / 100.0
            lo = math.floor(h)
            v = at_rank(lo)
            if h > lo:
                v += (h - lo) * (at_rank(lo + 1) - v)
            out[key] = v
        return out


def merged(logs) -> ItlLog:
    """One log counting every gap of ``logs`` (None entries skipped)."""
    out = ItlLog()
    for log in logs:
        if log is not None:
            out.add(log)
    return out

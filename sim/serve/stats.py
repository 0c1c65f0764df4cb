"""The served requests' counters and latency histograms, in simulated seconds (``/metrics``).

Latencies are the simulator's own figures for each request as its client gets it: TTFT from
arrival to the first token's delivery (through the front end where the profile models one),
inter-token latency between consecutive deliveries, end-to-end latency to the last, queue
time from arrival to admission. Buckets are vLLM's (vllm/v1/metrics/loggers.py).
"""

from __future__ import annotations

import bisect
from collections import Counter

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    """Cumulative-bucket histogram as Prometheus exposes it."""

    __slots__ = ("bounds", "counts", "total", "n")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: +Inf only
        self.total = 0.0
        self.n = 0

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, v)] += 1
        self.total += v
        self.n += 1

    def merge(self, other: "Histogram") -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.total += other.total
        self.n += other.n

    def buckets(self):
        """(le, cumulative count) pairs, ending with +Inf."""
        run = 0
        for bound, c in zip(self.bounds + (float("inf"),), self.counts):
            run += c
            yield bound, run


class ServeStats:
    """What one engine served: counts and the latency histograms."""

    def __init__(self) -> None:
        self.arrived = 0
        self.completed = 0
        self.rejects: Counter = Counter()  # reason -> requests (client_abort: aborted)
        self.steps = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.queue = Histogram(E2E_BUCKETS)
        self._last: dict[int, float] = {}  # request id -> when its latest token was delivered
        #: how late the HTTP side wrote streams' first tokens (simulated seconds past due): the
        #: server's own part of the difference between a client's TTFT and the simulator's
        self.first_late_n = 0
        self.first_late_sum = 0.0
        self.first_late_max = 0.0

    def token(self, req, at: float) -> None:
        self.generation_tokens += 1
        last = self._last.get(req.request_id)
        if last is None:
            self.ttft.observe(at - req.arrival_s)
        else:
            self.itl.observe(at - last)
        self._last[req.request_id] = at

    def finished(self, req, done_at: float) -> None:
        self._last.pop(req.request_id, None)
        self.completed += 1
        self.prompt_tokens += req.num_prompt_tokens
        self.e2e.observe(done_at - req.arrival_s)
        if req.admitted_s is not None:
            self.queue.observe(req.admitted_s - req.arrival_s)

    def first_written(self, late_s: float) -> None:
        self.first_late_n += 1
        self.first_late_sum += late_s
        self.first_late_max = max(self.first_late_max, late_s)

    def rejected(self, reason: str) -> None:
        self.rejects[reason] += 1

    def forget(self, request_id: int) -> None:
        self._last.pop(request_id, None)

"""A cost model's step time under an engine profile: graph replays, batch padding, host time.

The step model itself is described in sim/cost/profile.py (its module docstring and the
``EngineProfile`` fields); ``ProfiledCost`` applies a profile around a cost model built by
sim/cost/build.py. Pure.
"""

from __future__ import annotations

import bisect

from sim.cost.profile import EngineProfile, GraphMode, OutputProcessing
from sim.cost.shape import BatchShape


class ProfiledCost:
    """A cost model's step time under an engine profile (module docstring).

    ``eager`` and ``graph`` are the same cost model built without the calibration's step
    overhead, ``graph`` also without kernel launches. ``attention_launch_s``: the kernels a
    piecewise graph leaves to the host (one attention kernel per layer)."""

    def __init__(self, eager, graph, profile: EngineProfile, capture_sizes: tuple[int, ...],
                 attention_launch_s: float) -> None:
        self.eager, self.graph, self.profile = eager, graph, profile
        self.sizes = tuple(sorted(capture_sizes))
        self.max_size = self.sizes[-1] if self.sizes else 0
        self.attention_launch_s = attention_launch_s
        self.model_name, self.calibration_name = eager.model_name, eager.calibration_name
        self.kv_dtype = eager.kv_dtype
        self._piecewise = profile.graph_mode is GraphMode.FULL_AND_PIECEWISE
        self.step_host_s = profile.step_host_s
        self.seq_host_s = profile.seq_host_s + (
            profile.frontend_token_s if profile.output_processing is OutputProcessing.INLINE else 0.0)
        # attention data parallelism: each rank's loop schedules its own share of the requests, in parallel
        self.host_ranks = max(1, int(getattr(eager, "attention_ranks", 1)))
        # host time async scheduling does not hide (EngineProfile.exposed_*; none without async scheduling)
        hides = profile.async_scheduling
        self.exposed_step_s = profile.exposed_step_host_s if hides else 0.0
        self.exposed_seq_s = profile.exposed_seq_host_s if hides else 0.0
        self.exposed_kv_s = (profile.exposed_kv_token_host_s if hides else 0.0) / self.host_ranks  # its own KV
        self._exposes = hides and (self.exposed_step_s > 0.0 or self.exposed_seq_s > 0.0 or self.exposed_kv_s > 0.0)

    @property
    def composition(self):
        return self.eager.composition

    def without_composition(self):
        return self

    def _padded(self, n: int) -> int:
        return self.sizes[bisect.bisect_left(self.sizes, n)]

    def device_time_s(self, shape: BatchShape, idle_before_s: float = 0.0) -> float:
        """The GPU's time for the step: a graph replay where the batch is captured, else eager."""
        n, m = shape.num_seqs, shape.num_prefill_tokens + shape.num_decode_tokens
        if shape.num_prefill_tokens == 0 and 0 < n <= self.max_size:
            pad = self._padded(n) - n
            padded = shape._replace(num_seqs=n + pad, num_decode_tokens=shape.num_decode_tokens + pad)
            return self.graph.step_time_s(padded, idle_before_s)
        if self._piecewise and 0 < m <= self.max_size:
            pad = self._padded(m) - m
            padded = shape._replace(num_decode_tokens=shape.num_decode_tokens + pad)
            return self.graph.step_time_s(padded, idle_before_s) + self.attention_launch_s
        return self.eager.step_time_s(shape, idle_before_s)

    def decode_time_fn(self, num_seqs: int, num_tokens: int):
        """``kv -> step_time_s`` of a pure decode step, idle 0 (same float; macro-steps) or None."""
        n, graph = num_seqs, 0 < num_seqs <= self.max_size
        pad = self._padded(n) - n if graph else 0  # the captured size, as device_time_s pads
        inner = getattr(self.graph if graph else self.eager, "decode_time_fn", None)
        if inner is None:  # a fitted model: the caller calls step_time_s
            return None
        device, host = inner(n + pad, num_tokens + pad), self._host_s(n)
        if self.profile.async_scheduling:
            if self._exposes:  # step_time_s's floats: (device + exposed) against the host's
                exposed, per_kv = self._exposed_s(n), self.exposed_kv_s
                return lambda kv: d if (d := device(kv) + (exposed + per_kv * kv)) > host else host
            return lambda kv: d if (d := device(kv)) > host else host
        return lambda kv: device(kv) + host

    def _host_s(self, num_seqs: int) -> float:
        return self.step_host_s + self.seq_host_s * -(-num_seqs // self.host_ranks)

    def _exposed_s(self, num_seqs: int) -> float:
        """The per-step and per-sequence host time of a step that async scheduling does not hide."""
        return self.exposed_step_s + self.exposed_seq_s * -(-num_seqs // self.host_ranks)

    def host_time_s(self, shape: BatchShape) -> float:
        """Host time of the engine loop: per step, per sequence, and inline output processing; under
        attention data parallelism one rank's (the busiest: its ceil share of the sequences)."""
        return self._host_s(shape.num_seqs)

    def step_time_s(self, shape: BatchShape, idle_before_s: float = 0.0) -> float:
        if shape.num_prefill_tokens + shape.num_decode_tokens <= 0:
            return 0.0
        device, host = self.device_time_s(shape, idle_before_s), self.host_time_s(shape)
        if self.profile.async_scheduling:
            if self._exposes:  # host time the overlap does not hide (EngineProfile.exposed_*)
                device += self._exposed_s(shape.num_seqs) + self.exposed_kv_s * shape.decode_kv_tokens
            return device if device > host else host
        return device + host

    def swap_time_s(self, num_bytes: float, num_copies: int = 1) -> float:
        return self.eager.swap_time_s(num_bytes, num_copies)

    def staging_time_s(self, num_bytes: float, num_launches: int = 1) -> float:
        return self.eager.staging_time_s(num_bytes, num_launches)

"""A measured all-reduce time curve: NCCL's time at a few message sizes, for one GPU count.

One latency and one bus bandwidth (sim/calib/interconnect.py) describe an all-reduce well at
both ends and badly in between: NCCL switches protocol and algorithm with the message size, so
over 256 KiB-64 MiB it runs well above ``latency + 2 (n - 1) / n x S / busbw`` with the
latency of a tiny message and the bandwidth of a huge one (8x A100-SXM4 with nccl-tests: 77 us
at 1 MiB and 245 us at 16 MiB, where 10 us + S / 230 GB/s gives 18 and 138). A calibration may
therefore give a GPU count the times it measured::

    by_num_gpus:
      8: {allreduce_curve: [[262144, 4.5e-05], [1048576, 7.7e-05], [16777216, 2.45e-04]]}

each point ``[message bytes, seconds]``, in increasing bytes (nccl-tests' out-of-place
``time``; ``microbench calibrate`` writes the sizes it timed). Between two points the time is
interpolated linearly in the bytes; above the largest it grows from the largest point's time at
the count's bus bandwidth. Below the smallest it falls along the line through the first two
points (NCCL's time is linear in the bytes within one protocol), never faster than the count's
all-reduce latency (``floor_s``: the calibration's ``allreduce_latency_s``) and never slower than
the smallest point: a curve measured from 4 KiB stays flat below it, one that starts at 2 MiB,
where the bandwidth already shows, falls towards its latency. Which all-reduces run NCCL, and so
take this curve, is the engine's choice (EngineProfile.custom_allreduce_bytes in
sim/cost/profile.py): engines run their own one-shot kernel for small messages, which the
latency + bandwidth form describes. Pure.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from sim.calib.numbers import number_in
from sim.errors import ConfigError

_BYTES = (1.0, 1e13)
_SECONDS = (1e-7, 10.0)


@dataclass(frozen=True)
class AllReduceCurve:
    """(bytes, seconds) points in increasing bytes; ``seconds_per_byte`` past the last point."""

    sizes: tuple[float, ...]
    times: tuple[float, ...]

    def seconds(self, num_bytes: float, seconds_per_byte: float, floor_s: float = 0.0) -> float:
        """One all-reduce of ``num_bytes`` (module docstring): ``seconds_per_byte`` beyond the last
        point, the first two points' line below the first, never under ``floor_s`` there."""
        sizes, times = self.sizes, self.times
        if num_bytes <= sizes[0]:
            slope = max(0.0, (times[1] - times[0]) / (sizes[1] - sizes[0]))
            return max(min(floor_s, times[0]), times[0] - (sizes[0] - num_bytes) * slope)
        if num_bytes >= sizes[-1]:
            return times[-1] + (num_bytes - sizes[-1]) * seconds_per_byte
        i = bisect.bisect_right(sizes, num_bytes)
        s0, s1, t0, t1 = sizes[i - 1], sizes[i], times[i - 1], times[i]
        return t0 + (t1 - t0) * (num_bytes - s0) / (s1 - s0)


def _point(value: Any, file: str, key: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(file, key, f"expected [bytes, seconds], got {value!r}"[:300])
    return (number_in(value[0], file, key, *_BYTES, what="bytes"),
            number_in(value[1], file, key, *_SECONDS, what="seconds"))


def curve_from_list(data: Any, *, file: str, key: str) -> AllReduceCurve:
    """The parsed ``allreduce_curve`` at ``key``: two or more [bytes, seconds] points in strictly
    increasing bytes; a one-line ConfigError otherwise. A time may dip as the message grows (NCCL
    changes protocol: a measured 256 KiB all-reduce can beat a 128 KiB one), so none is refused for it."""
    if not isinstance(data, (list, tuple)) or len(data) < 2:
        raise ConfigError(file, key, "expected a list of two or more [bytes, seconds] points, in increasing bytes")
    points = [_point(p, file, f"{key}[{i}]") for i, p in enumerate(data)]
    for i in range(1, len(points)):
        (s0, _), (s1, _) = points[i - 1], points[i]
        if s1 <= s0:
            raise ConfigError(file, f"{key}[{i}]", f"bytes {s1:g} do not exceed the previous point's {s0:g}: "
                              "allowed: points in strictly increasing bytes")
    return AllReduceCurve(tuple(s for s, _ in points), tuple(t for _, t in points))


def curve_to_list(curve: AllReduceCurve) -> list[list[float]]:
    """The YAML form of ``curve`` (inverse of curve_from_list)."""
    return [[int(s) if float(s).is_integer() else s, float(f"{t:.6g}")] for s, t in zip(curve.sizes, curve.times,
                                                                                         strict=True)]


__all__ = ["AllReduceCurve", "curve_from_list", "curve_to_list"]

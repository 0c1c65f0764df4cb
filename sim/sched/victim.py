"""Preemption victims: which running request gives up its KV when the pool runs dry.

A policy picks one of the *candidates*: the running requests not yet scheduled this step,
the one that needs room included (the scheduler serves requests in priority order, so
anything it already served this step is safe). Every policy breaks ties by preferring the
most recently admitted request (the largest ``admit_seq``), so the choice is deterministic.

* ``lifo``: the most recently admitted (vLLM's default): it has the least sunk work.
* ``fewest-blocks``: the one holding the least KV: cheapest to recompute or swap.
* ``most-blocks``: the one holding the most KV: frees the most memory at once.
* ``longest-remaining``: the one expected to run longest, by the *workload's* output
  length distribution conditioned on what it has generated so far (``E[L - g | L > g]``,
  capped by its ``max_tokens``); the true hidden length is never looked at.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Callable, Sequence

import numpy as np

from sim.request import Request


class VictimPolicy(StrEnum):
    LIFO = "lifo"
    FEWEST_BLOCKS = "fewest-blocks"
    MOST_BLOCKS = "most-blocks"
    LONGEST_REMAINING = "longest-remaining"


class RemainingOutputModel:
    """``E[L - g | L > g]`` for an output-length sample ``L``; O(log n) per query."""

    def __init__(self, output_lengths: Sequence[int]) -> None:
        lengths = np.sort(np.asarray(output_lengths, dtype=float))
        if lengths.size == 0:
            raise ValueError("output_lengths must not be empty")
        self._lengths = lengths
        # suffix_sum[i] = sum(lengths[i:])
        self._suffix_sum = np.concatenate((np.cumsum(lengths[::-1])[::-1], [0.0]))

    def expected_remaining(self, generated: int, max_tokens: int) -> float:
        i = int(np.searchsorted(self._lengths, generated, side="right"))  # first L > g
        n = self._lengths.size - i
        if n == 0:
            expected = 1.0  # longer than anything seen: at least one more token
        else:
            expected = self._suffix_sum[i] / n - generated
        return min(expected, max(max_tokens - generated, 0))


def pick_victim(policy: VictimPolicy, candidates: Sequence[Request],
                held_slots: Callable[[Request], int],
                remaining: RemainingOutputModel | None = None) -> Request:
    """The request to preempt among ``candidates`` (non-empty)."""
    if policy == VictimPolicy.LIFO:
        return max(candidates, key=lambda r: r.admit_seq)
    if policy == VictimPolicy.FEWEST_BLOCKS:
        return min(candidates, key=lambda r: (held_slots(r), -r.admit_seq))
    if policy == VictimPolicy.MOST_BLOCKS:
        return max(candidates, key=lambda r: (held_slots(r), r.admit_seq))
    if policy == VictimPolicy.LONGEST_REMAINING:
        if remaining is None:
            raise ValueError("longest-remaining needs a RemainingOutputModel")
        return max(candidates, key=lambda r: (
            remaining.expected_remaining(r.num_generated, r.max_tokens), r.admit_seq))
    raise ValueError(f"unknown victim policy {policy!r}")

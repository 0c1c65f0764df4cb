"""Batching policies behind one interface (``base.SchedulerBase``), chosen by
``BatchingPolicy``; preemption (recompute or swap) and victim policies.

May import: ``sim.kv`` (through its allocator interface), ``sim.cost.shape``, ``sim.request``.
"""

from __future__ import annotations

from enum import StrEnum

from sim.sched.continuous import ContinuousScheduler
from sim.sched.static import StaticScheduler


class BatchingPolicy(StrEnum):
    STATIC = "static"
    CONTINUOUS = "continuous"
    CHUNKED_PREFILL = "chunked-prefill"


class WhenKVFull(StrEnum):
    """What admission does when a new request's KV does not fit right now.

    ``queue`` waits (vLLM); ``reject`` fails the request with reason ``kv_cache_full``,
    as a naive server that pre-allocates and OOMs would.
    """

    QUEUE = "queue"
    REJECT = "reject"


def make_scheduler(policy: BatchingPolicy, allocator, preemptor, **limits):
    """The one place a ``BatchingPolicy`` becomes an object."""
    if policy == BatchingPolicy.STATIC:
        return StaticScheduler(allocator, preemptor, **limits)
    chunked = policy == BatchingPolicy.CHUNKED_PREFILL
    return ContinuousScheduler(allocator, preemptor, chunked=chunked, **limits)

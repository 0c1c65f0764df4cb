"""Batching policies behind one interface (``base.SchedulerBase``), chosen by
``BatchingPolicy``."""

from __future__ import annotations

from sim.scenario import BatchingPolicy
from sim.sched.continuous import ContinuousScheduler
from sim.sched.static import StaticScheduler


def make_scheduler(policy: BatchingPolicy, allocator, preemptor, **limits):
    """The one place a ``BatchingPolicy`` becomes an object."""
    if policy == BatchingPolicy.STATIC:
        return StaticScheduler(allocator, preemptor, **limits)
    chunked = policy == BatchingPolicy.CHUNKED_PREFILL
    return ContinuousScheduler(allocator, preemptor, chunked=chunked, **limits)

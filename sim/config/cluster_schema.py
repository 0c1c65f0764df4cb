"""The scenario's ``cluster`` section: replicas of the engine behind a router.

Every replica is the scenario's engine (same model, GPU, tensor parallelism, profile and KV
settings) with its own scheduler, allocator, swap space, PCIe link, front end and step log;
sim/engine/cluster.py runs them on one clock and sim/engine/router.py picks a replica for
each request. ``num_replicas: 1`` (the default) is one engine and no router: today's path.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from sim.config.limits import pos_float, pos_int


class RouterKind(StrEnum):
    ROUND_ROBIN = "round-robin"  # replicas in turn
    LEAST_OUTSTANDING = "least-outstanding"  # fewest requests in flight (queued, running, swapped, in the front end)
    LEAST_KV = "least-kv"  # most free KV slots
    PREFIX_AWARE = "prefix-aware"  # longest cached prefix, unless that replica is overloaded


class ClusterConfig(BaseModel):
    """``num_replicas`` engines behind a ``router``; ``sticky_sessions``: later turns of a
    conversation go to the replica of its first turn; ``prefix_load_factor``: the
    prefix-aware router falls back to least-outstanding when the best-matching replica has
    more than this times the mean outstanding requests."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    num_replicas: pos_int("cluster.num_replicas") = 1
    router: Annotated[RouterKind, Field(strict=False)] = RouterKind.ROUND_ROBIN
    sticky_sessions: bool = True
    prefix_load_factor: pos_float("cluster.prefix_load_factor") = 1.5

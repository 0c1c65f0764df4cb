"""The scenario's ``cluster`` section: replicas of the engine behind a router, and
disaggregated prefill/decode pools.

Every replica is the scenario's engine (same model, GPU, tensor parallelism, profile and KV
settings) with its own scheduler, allocator, swap space, PCIe link, front end and step log;
sim/engine/cluster/simulation.py runs them on one clock and sim/engine/cluster/router.py picks a replica for
each request. ``num_replicas: 1`` (the default) is one engine and no router: today's path.

``disaggregation`` splits the replicas into a prefill pool and a decode pool
(sim/engine/disagg/handoff.py): ``prefill_replicas + decode_replicas`` engines (``num_replicas``
follows from them; giving it too, it must equal their sum), each pool with its own
``engine``/``scheduler`` overrides of the scenario's (checked when the run is assembled:
sim/engine/disagg/pools.py), and a KV transfer link between them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sim.config.limits import pos_float, pos_int


class RouterKind(StrEnum):
    ROUND_ROBIN = "round-robin"  # replicas in turn
    LEAST_OUTSTANDING = "least-outstanding"  # fewest requests in flight (queued, running, swapped, in the front end)
    LEAST_KV = "least-kv"  # most free KV slots
    PREFIX_AWARE = "prefix-aware"  # longest cached prefix, unless that replica is overloaded (llm-d's precise scorer)
    CACHE_AWARE = "cache-aware"  # SGLang's router: a tree of the prompts sent to each replica, balance thresholds


class DecodeRouterKind(StrEnum):
    """How a finished prefill's request picks its decode replica."""

    LEAST_KV = "least-kv"
    LEAST_OUTSTANDING = "least-outstanding"


class TransferGranularity(StrEnum):
    BLOCK = "block"  # every block once the prefill is done (vLLM's NIXL connector pulls them then)
    LAYER = "layer"  # each layer's KV as its layer finishes: overlaps the prefill's last step


_Strict = ConfigDict(extra="forbid", frozen=True, strict=True)
#: Bounds of the disaggregation keys (kept here: they apply to this section only).
_MAX_POOL = 256  # as cluster.num_replicas
_Replicas = Annotated[int, Field(gt=0, le=_MAX_POOL)]
_Gbps = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]  # up to 1 Pb/s
_Seconds = Annotated[float, Field(ge=0, le=60.0, allow_inf_nan=False)]
_Fraction = Annotated[float, Field(ge=0, le=1.0, allow_inf_nan=False)]
_Ratio = Annotated[float, Field(ge=1.0, le=1e6, allow_inf_nan=False)]
_Count = Annotated[int, Field(ge=0, le=2**40)]
_Interval = Annotated[float, Field(ge=0, le=1e7, allow_inf_nan=False)]


class KVTransferConfig(BaseModel):
    """The link between the pools: ``bandwidth_gbps`` per GPU's NIC in gigabits per second
    (a ConnectX-7: 400), ``latency_s`` per transfer, ``granularity`` block or layer."""

    model_config = _Strict

    bandwidth_gbps: _Gbps = Field(
        description="Each GPU's NIC, in gigabits per second (a ConnectX-7: 400); the shards of a request's KV "
                    "move side by side, one per GPU.")
    latency_s: _Seconds = Field(0.0, description="Fixed time per transfer, in seconds.")
    granularity: Annotated[TransferGranularity, Field(strict=False)] = Field(
        TransferGranularity.BLOCK,
        description="`block`: the transfer starts once the prefill has ended; `layer`: a layer's KV leaves once "
                    "the prompt's last step has computed it, overlapping that step "
                    "([KV transfer](../guides/fleets.md#the-kv-transfer)).")


class PoolConfig(BaseModel):
    """One pool's overrides of the scenario's ``engine`` and ``scheduler`` keys (e.g.
    ``engine: {tensor_parallel_size: 2}``); checked against the scenario schema when the run
    is assembled, their errors naming ``cluster.disaggregation.<pool>.<key>``."""

    model_config = _Strict

    engine: dict[str, Any] = Field(default_factory=dict, description="Keys of the scenario's `engine` section.")
    scheduler: dict[str, Any] = Field(default_factory=dict,
                                      description="Keys of the scenario's `scheduler` section.")


class DisaggregationConfig(BaseModel):
    """``prefill_replicas`` engines run prompts (the cluster's ``router`` picks one), then
    hand each request's KV over ``kv_transfer`` to one of ``decode_replicas`` engines
    (picked by ``decode_router``), which generate the rest of the answer."""

    model_config = _Strict

    prefill_replicas: _Replicas = Field(description="Engines of the prefill pool.")
    decode_replicas: _Replicas = Field(description="Engines of the decode pool.")
    prefill: PoolConfig = Field(PoolConfig(), description="The prefill pool's overrides (below).")
    decode: PoolConfig = Field(PoolConfig(), description="The decode pool's overrides (below).")
    kv_transfer: KVTransferConfig | None = Field(
        None, description="The link the KV crosses (below); required.")
    decode_router: Annotated[DecodeRouterKind, Field(strict=False)] = Field(
        DecodeRouterKind.LEAST_KV, description="How a finished prefill's request picks its decode replica: "
                                               "`least-kv` (most free KV slots) or `least-outstanding`.")

    @model_validator(mode="after")
    def _needs_a_link(self):
        if self.kv_transfer is None:
            raise ValueError(
                f"a {self.prefill_replicas}:{self.decode_replicas} prefill:decode split needs kv_transfer: "
                "{bandwidth_gbps, latency_s, granularity: block|layer} (the link the KV crosses)")
        return self


class ClusterConfig(BaseModel):
    """``num_replicas`` engines behind a ``router``; ``sticky_sessions``: later turns of a
    conversation go to the replica of its first turn; ``prefix_load_factor``: the
    prefix-aware router falls back to least-outstanding when the best-matching replica has
    more than this times the mean outstanding requests. With ``disaggregation`` the router
    and stickiness apply to the prefill pool."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    num_replicas: pos_int("cluster.num_replicas") = Field(
        1, description="Engines behind a router, each the scenario's whole engine "
                       "([fleets and routers](../guides/fleets.md)); 1: one engine, no router. With "
                       "`disaggregation` it follows from the pools (if given, it must be their sum).")
    router: Annotated[RouterKind, Field(strict=False)] = Field(
        RouterKind.ROUND_ROBIN,
        description="`round-robin`; `least-outstanding` (fewest requests in flight: waiting, running, swapped, "
                    "in its front end); `least-kv` (most free KV slots); `prefix-aware` (longest cached prefix "
                    "of the prompt, read from each replica's cache as llm-d's precise scorer knows it, unless that "
                    "replica has more than `prefix_load_factor` times the mean outstanding requests: then "
                    "least-outstanding); `cache-aware` (SGLang's router: a tree of the prompts it has sent to each "
                    "replica, `cache_threshold` and the `balance_*` thresholds below).")
    sticky_sessions: bool = Field(
        True, description="Later turns of a conversation go to the replica of its first turn (`false`: the "
                          "router picks again).")
    prefix_load_factor: pos_float("cluster.prefix_load_factor") = Field(
        1.5, description="The `prefix-aware` router's load limit, in times the mean outstanding requests over "
                         "replicas.")
    cache_threshold: _Fraction = Field(
        0.3, description="`cache-aware`: route to the replica the tree matches best when the match is more than "
                         "this fraction of the prompt's tokens; otherwise to the replica with the smallest tree "
                         "(SGLang's default 0.3).")
    balance_abs_threshold: _Count = Field(
        64, description="`cache-aware`: loads (outstanding requests) are imbalanced, and the least loaded replica "
                        "gets the request, when the most loaded has more than this many more than the least "
                        "loaded *and* more than `balance_rel_threshold` times as many (SGLang's default 64).")
    balance_rel_threshold: _Ratio = Field(
        1.5, description="`cache-aware`: the relative half of the imbalance test (SGLang's default 1.5).")
    eviction_interval_s: _Interval = Field(
        120.0, description="`cache-aware`: seconds between the tree's evictions (SGLang's default 120; 0: never).")
    max_tree_size: _Count = Field(
        2**26, description="`cache-aware`: tokens of prompts each replica's part of the tree keeps at an eviction "
                           "(least recently used leaves go first; SGLang's default 2^26, in characters there).")
    disaggregation: DisaggregationConfig | None = Field(
        None, description="Split the replicas into a prefill pool and a decode pool (below; unset: one pool).")

    @model_validator(mode="before")
    @classmethod
    def _replicas_of_the_pools(cls, data):
        """With ``disaggregation``, ``num_replicas`` is the pools' sum (filled in when unset)."""
        if not isinstance(data, dict) or not isinstance(data.get("disaggregation"), dict):
            return data
        pools = data["disaggregation"]
        p, d = pools.get("prefill_replicas"), pools.get("decode_replicas")
        if not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= _MAX_POOL for n in (p, d)):
            return data  # the pools' own validation names the bad key
        if "num_replicas" not in data:
            return {**data, "num_replicas": p + d}
        if data["num_replicas"] != p + d:
            raise ValueError(
                f"num_replicas {data['num_replicas']!r} is not prefill_replicas + decode_replicas ({p} + {d}); "
                "leave it out with disaggregation (it follows from the pools)")
        return data

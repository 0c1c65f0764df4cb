"""Assembling the two pools of a disaggregated cluster (sim/engine/disagg/handoff.py).

Each pool runs the scenario's engine with the pool's own ``engine`` and ``scheduler``
overrides (``cluster.disaggregation.prefill`` / ``.decode``, e.g. another tensor
parallelism or profile). A pool's scenario is the user's scenario as written (the keys an
engine profile filled in left out, so a pool with another profile gets that profile's
defaults), without its ``cluster`` block, with the overrides merged in, validated like any
scenario: an error in an override names its full key (``cluster.disaggregation.decode.
engine.tensor_parallel_size``).

The KV a request moves is sized here: ``blocks x block_size`` tokens, each token the
model's KV bytes per GPU under each pool's tensor parallelism (sim/model/memory.py's
``bytes_per_token`` of the pool's plan). Every GPU of a replica has its own NIC, so the
shards move in parallel and a transfer takes as long as its largest per-GPU shard:
``latency_s + blocks x max(prefill, decode bytes per block per GPU) x 8 / bandwidth``.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from sim.config.scenario import Scenario, parse_scenario
from sim.engine.parts import EngineParts, build_parts, replica_parts
from sim.errors import ConfigError


def pool_scenario(sc: Scenario, role: str) -> tuple[Scenario, dict]:
    """(the scenario one replica of pool ``role`` runs, the overrides it was given)."""
    pool = getattr(sc.cluster.disaggregation, role)
    overrides = {"engine": dict(pool.engine), "scheduler": dict(pool.scheduler)}
    data = sc.model_dump(mode="json", exclude_unset=True)
    for key in sc.profile_defaults:  # "scheduler.policy", "kv.prefix_caching": the profile's, not the user's
        section, _, name = key.partition(".")
        data.get(section, {}).pop(name, None)
    data.pop("cluster", None)
    for section, values in overrides.items():
        data[section] = {**data.get(section, {}), **copy.deepcopy(values)}
    try:
        return parse_scenario(data, sc.source_path), overrides
    except ConfigError as exc:
        raise _rekeyed(exc, role, overrides) from None


def _rekeyed(exc: ConfigError, role: str, overrides: dict) -> ConfigError:
    """``exc`` naming ``cluster.disaggregation.<role>.<key>`` when an override set that key."""
    given = {f"{section}.{k}" for section, values in overrides.items() for k in values}
    if any(exc.key == g or exc.key.startswith(g + ".") for g in given):
        return ConfigError(exc.file, f"cluster.disaggregation.{role}.{exc.key}", exc.message)
    return exc


@dataclass(frozen=True)
class TransferSizing:
    """How many bytes a block of KV is on each side, and the link's numbers."""

    block_size: int  # tokens per block (the same on both sides: the scenario's kv.block_size)
    bytes_per_block_gpu: int  # the larger per-GPU shard of one block, prefill or decode
    bytes_per_block_decode: int  # one block over all of a decode replica's GPUs
    num_layers: int
    bandwidth_bytes_per_s: float  # one GPU's NIC
    latency_s: float
    layer_wise: bool

    def seconds(self, blocks: int) -> float:
        """Link time of ``blocks`` blocks moved at once (block-wise)."""
        return self.latency_s + blocks * self.bytes_per_block_gpu / self.bandwidth_bytes_per_s


def build_pools(sc: Scenario) -> tuple[list[EngineParts], list[EngineParts], TransferSizing]:
    """(parts of every prefill replica, of every decode replica, the transfer's sizing)."""
    dis = sc.cluster.disaggregation
    pools = []
    for role, count in (("prefill", dis.prefill_replicas), ("decode", dis.decode_replicas)):
        pool_sc, overrides = pool_scenario(sc, role)
        if str(pool_sc.scheduler.policy) == "static":
            key = "scheduler.policy" if "policy" not in overrides["scheduler"] else \
                f"cluster.disaggregation.{role}.scheduler.policy"
            raise ConfigError(sc.source_path, key, (
                f"the {role} pool of a disaggregated cluster batches continuously: static batches "
                "cannot hand requests over one by one; use continuous or chunked-prefill"))
        try:
            first = build_parts(pool_sc)
        except ConfigError as exc:
            raise _rekeyed(exc, role, overrides) from None
        pools.append([first] + [replica_parts(first) for _ in range(count - 1)])
    prefill, decode = pools
    p, d = prefill[0], decode[0]
    link = dis.kv_transfer
    tp_d = d.sc.engine.tensor_parallel_size
    sizing = TransferSizing(
        block_size=d.plan.block_size, bytes_per_block_gpu=max(p.plan.bytes_per_block, d.plan.bytes_per_block),
        bytes_per_block_decode=d.plan.bytes_per_block * tp_d, num_layers=d.model.num_layers,
        bandwidth_bytes_per_s=link.bandwidth_gbps * 1e9 / 8, latency_s=link.latency_s,
        layer_wise=str(link.granularity) == "layer")
    return prefill, decode, sizing


def with_sessions(parts: EngineParts, sessions) -> EngineParts:
    """``parts`` sharing the cluster's sessions (one workload for the whole cluster)."""
    return dataclasses.replace(parts, sessions=sessions)

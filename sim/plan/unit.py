"""Serving units: a configuration with ``cluster.num_replicas`` > 1 (or a prefill:decode
split) is planned as a whole *unit* of replicas behind its router.

A unit is simulated whole, as ``sim run`` runs it (sim/engine/cluster/simulation.py's
ClusterSimulation; replicas of a pipeline-parallel engine in vLLM V1's batch-queue form:
sim/engine/pipeline/simulation.py's PipelineSimulation, which builds a PipelineCluster; replicas of V0's
virtual-engines form and pipeline parallelism in disaggregated pools are refused by the
engine's own checks, :func:`check_modelled`): its max rate is the unit's, the target needs
ceil(target / unit max rate) units, and a unit is ``gpus`` GPUs: ``num_replicas x tensor x
pipeline parallel size``, or with disaggregation ``prefill_replicas x the prefill pool's TP + decode_replicas x the decode
pool's TP`` (each pool's own ``engine`` overrides). A single-replica configuration of a plan
that has units is a unit of one replica (no router: the plan assumes its replicas share
the load evenly, as for a plan without units).

Cluster keys a plan may search (``space``): ``cluster`` (a whole mapping per value),
``cluster.num_replicas``, ``cluster.router``, ``cluster.sticky_sessions``,
``cluster.prefix_load_factor``, the cache-aware router's keys (``cluster.cache_threshold``,
``cluster.balance_abs_threshold``, ``cluster.balance_rel_threshold``, ``cluster.eviction_interval_s``,
``cluster.max_tree_size``) and ``cluster.disaggregation`` (a whole mapping per value,
``null`` for one pool, or any of its sub-keys).
"""

from __future__ import annotations

from sim.errors import ConfigError

CLUSTER_KEYS = ("num_replicas", "router", "sticky_sessions", "prefix_load_factor", "cache_threshold",
                "balance_abs_threshold", "balance_rel_threshold", "eviction_interval_s", "max_tree_size",
                "disaggregation")


def is_cluster_key(key: str) -> bool:
    return key == "cluster" or key.startswith("cluster.")


def check_cluster_key(path: str, key: str) -> None:
    """ConfigError unless ``key`` is ``cluster`` or one of :data:`CLUSTER_KEYS` (or below
    ``cluster.disaggregation``)."""
    parts = key.split(".")
    if key == "cluster" or parts[1] in CLUSTER_KEYS and (len(parts) == 2 or parts[1] == "disaggregation"):
        return
    raise ConfigError(path, f"space.{key}", "a plan searches cluster, "
                      + ", ".join(f"cluster.{k}" for k in CLUSTER_KEYS) + " or cluster.disaggregation.<key>")


#: The keys behind a pipeline-parallel unit the engine refuses (:func:`check_modelled`), when
#: the space searches none of the cluster keys its error names.
PIPELINE_KEYS = ("engine.pipeline_mode", "engine.pipeline_parallel_size", "engine.profile")


def check_modelled(sc) -> None:
    """ConfigError from the engine's own checks for what ``sim run`` refuses to simulate:
    replicas of a pipeline-parallel engine in the virtual-engines form, pipeline parallelism
    in disaggregated pools (sim/engine/pipeline/cluster.py ``check_pipeline_cluster``) and a
    pool's own ``engine.pipeline_parallel_size`` > 1 (sim/engine/cluster/simulation.py), checked before
    anything runs (no memory plan is needed)."""
    from sim.engine.pipeline.cluster import check_pipeline_cluster

    check_pipeline_cluster(sc)
    if sc.cluster.disaggregation is not None:
        from sim.engine.cluster.simulation import refuse_pipeline_pools
        from sim.engine.disagg.pools import pool_scenario

        refuse_pipeline_pools(sc, {role: pool_scenario(sc, role)[0] for role in ("prefill", "decode")})


def unit_shape(sc) -> dict:
    """The unit a validated scenario describes: replicas, router, P:D split, GPUs
    (ConfigError from a pool's overrides, naming ``cluster.disaggregation.<pool>.<key>``)."""
    cl, eng = sc.cluster, sc.engine
    per_replica = eng.tensor_parallel_size * eng.pipeline_parallel_size
    dis = cl.disaggregation
    shape = {"num_replicas": cl.num_replicas, "router": str(cl.router) if cl.num_replicas > 1 else None,
             "prefill_replicas": None, "decode_replicas": None, "gpus": cl.num_replicas * per_replica}
    if dis is not None:
        from sim.engine.disagg.pools import pool_scenario

        gpus = 0
        for role, count in (("prefill", dis.prefill_replicas), ("decode", dis.decode_replicas)):
            pool, _ = pool_scenario(sc, role)
            gpus += count * pool.engine.tensor_parallel_size * pool.engine.pipeline_parallel_size
        shape.update(prefill_replicas=dis.prefill_replicas, decode_replicas=dis.decode_replicas, gpus=gpus)
    return shape


def split_label(unit: dict | None) -> str:
    """``1:3`` for a prefill:decode split, ``-`` for one pool."""
    if not unit or unit["prefill_replicas"] is None:
        return "-"
    return f"{unit['prefill_replicas']}:{unit['decode_replicas']}"


UNIT_HEAD = ("router", "replicas/unit", "P:D", "GPUs/unit", "units")


def unit_cells(r: dict) -> tuple[str, ...]:
    """A record's unit columns (:data:`UNIT_HEAD`) of the terminal and HTML tables."""
    u = r["unit"]
    return (u["router"] or "-", str(u["num_replicas"]), split_label(u), str(u["gpus"]), str(r.get("units") or "-"))


def short_label(unit: dict) -> str:
    """``1 replica``, ``4 x round-robin``, ``P:D 1:3, prefix-aware``: a chart's category."""
    if unit["num_replicas"] == 1:
        return "1 replica"
    if unit["prefill_replicas"] is not None:
        return f"P:D {split_label(unit)}, {unit['router']}"
    return f"{unit['num_replicas']} x {unit['router']}"


def _a(n: int) -> str:
    """The article before a number: ``an 8``, ``an 11``, ``a 4``."""
    return "an" if str(n).startswith("8") or n in (11, 18) else "a"


def describe(unit: dict) -> str:
    """``a 4-replica unit (prefix-aware)``, ``a 1:3 prefill:decode unit (4 replicas, ...)``, ``one replica``."""
    if unit["num_replicas"] == 1:
        return "one replica"
    if unit["prefill_replicas"] is not None:
        return (f"{_a(unit['prefill_replicas'])} {split_label(unit)} prefill:decode unit "
                f"({unit['num_replicas']} replicas, {unit['router']})")
    return f"{_a(unit['num_replicas'])} {unit['num_replicas']}-replica unit ({unit['router']})"


def memory_of(sc, planned: tuple | None = None) -> dict:
    """A scenario's memory plan, as plan.json's ``memory`` (ConfigError when it does not fit,
    in GPU memory or, for ``kv.offload``'s CPU tier, in host memory: build_plan);
    ``planned``: ``build_plan(sc)``, when the caller has made it."""
    from sim.engine.host_memory import host_plan
    from sim.engine.parts import build_plan

    _, _, plan = build_plan(sc) if planned is None else planned
    return {"kv_pool_tokens": plan.pool_tokens, "max_full_length_requests": plan.max_full_length_seqs,
            "max_concurrency": plan.max_concurrency, "num_gpu_blocks": plan.num_gpu_blocks,
            "bytes_per_token": plan.bytes_per_token, "weight_bytes_per_gpu": plan.weight_bytes,
            "max_model_len": plan.max_model_len, **(host_plan(sc, plan.bytes_per_block, plan.block_size) or {})}


def unit_memory(data: dict, source: str) -> dict | None:
    """With disaggregation: each pool's memory plan (ConfigError naming the pool when one
    does not fit); else None (every replica has the scenario's own plan)."""
    from sim.config.scenario import parse_scenario
    from sim.engine.disagg.pools import pool_scenario

    sc = parse_scenario(data, source)
    if sc.cluster.disaggregation is None:
        return None
    pools = {}
    for role in ("prefill", "decode"):
        pool, _ = pool_scenario(sc, role)
        try:
            pools[role] = {**memory_of(pool), "tensor_parallel_size": pool.engine.tensor_parallel_size}
        except ConfigError as exc:
            raise ConfigError(exc.file, exc.key, f"the {role} pool: {exc.message}") from None
    return pools


def hit_rate(result) -> float | None:
    """The prefix cache's hit rate over a run (a Simulation's or a cluster's result; with
    disaggregation the prefill pool's, where prompts are cached); None when it is off."""
    handoff = getattr(result, "handoff", None)
    if handoff is not None:
        from sim.engine.disagg.summary import prefill_pool_hit_rate

        return prefill_pool_hit_rate(result)
    replicas = getattr(result, "replicas", None) or [result]
    stats = [r.allocator.prefix_cache_stats() for r in replicas]
    queried = sum(s.queried_tokens for s in stats)
    return sum(s.hit_tokens for s in stats) / queried if stats[0].enabled and queried else None


def run_unit(sc, planned: tuple | None = None):
    """Simulate ``sc`` as ``sim run`` does: a pipeline-parallel engine (pp > 1) through
    sim/engine/pipeline/simulation.py's PipelineSimulation (its form's engine: one batch-queue engine,
    V0's virtual engines, or with replicas a PipelineCluster of batch-queue engines behind
    the router), else the whole unit when it has several replicas, else one engine.
    ``planned``: ``build_plan(sc)``, made once per configuration (the rate does not change it);
    a disaggregated unit plans per pool and ignores it."""
    if sc.engine.pipeline_parallel_size > 1:
        from sim.engine.pipeline.simulation import PipelineSimulation

        return PipelineSimulation(sc, planned=planned).run()
    if sc.cluster.num_replicas > 1:
        from sim.engine.cluster.simulation import ClusterSimulation

        return ClusterSimulation(sc, planned=planned).run()
    from sim.engine.simulation import Simulation

    return Simulation(sc, planned=planned).run()

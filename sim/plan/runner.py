"""Run every configuration's search on a sweep executor (a local ``spawn`` process pool
whose workers die with their parent, or Ray: sim/sweep/executors.py), saving each record
as it finishes (sim/plan/points.py) and reusing the saved ones with ``resume``.

Configurations run in waves (sim/plan/reuse.py): wave 0 holds every configuration without
a smaller-pool neighbour, wave k those whose neighbour is in wave k - 1, each starting its
rate search from that neighbour's answer; in a plan with units, a unit whose one-replica
twin is in the space runs in the wave after it and starts at N x its answer. Without a pool
key or twins in the space there is one wave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import ConfigError
from sim.plan.points import fingerprint, load_points, save_point
from sim.plan.reuse import chains, neighbours, pool_key, start_rate
from sim.plan.search import evaluate_config
from sim.plan.spec import PlanSpec


@dataclass
class PlanRun:
    records: list[dict]  # one per configuration, in the space's order
    computed: int = 0  # searched in this invocation
    reused: int = 0  # taken from DIR/configs (--resume)
    pool_key: str | None = None  # the key chains run along (None: no bracket reuse)
    stats: dict = field(default_factory=dict)


def run_plan(spec: PlanSpec, executor, out_dir: Path | None = None, *, resume: bool = False,
             on_done=None) -> PlanRun:
    """Search every configuration with ``executor(tasks, on_result, fn=...)``; with
    ``out_dir``, save each record in DIR/configs and, with ``resume``, reuse those there."""
    fp = fingerprint(spec)
    records: dict[int, dict] = load_points(out_dir, spec, fp) if (resume and out_dir is not None) else {}
    reused = len(records)
    if out_dir is not None:
        (Path(out_dir) / "configs").mkdir(parents=True, exist_ok=True)
    key = pool_key(spec.keys, spec.configs)
    wave, neighbour, scale = neighbours(spec.keys, spec.configs, key)
    computed = 0

    def on_result(record: dict) -> None:
        nonlocal computed
        computed += 1
        if spec.clustered:  # 1: from a smaller pool; N: N x a one-replica twin; None: cold
            record["start_scale"] = scale.get(record["index"]) if record["start_rate"] is not None else None
        records[record["index"]] = record
        if out_dir is not None:
            save_point(out_dir, fp, record)
        if on_done is not None:
            on_done(record)

    for k in range(max(wave.values(), default=-1) + 1):
        tasks = []
        for c in spec.configs:
            if wave[c.index] != k or c.index in records:
                continue
            n = neighbour[c.index]
            start = start_rate(records.get(n), spec.search, scale[c.index]) if n is not None else None
            tasks.append((c, spec.slo, spec.search, start, n))
        if tasks:
            executor(tasks, on_result, fn=evaluate_config)
    ordered = [records[c.index] for c in spec.configs]
    stats = probe_stats(spec, ordered, key, chains(spec.keys, spec.configs, key)[1])
    if spec.clustered:
        stats["warm_from_one_replica"] = sum(1 for r in ordered if (r.get("start_scale") or 1) > 1)
    return PlanRun(ordered, computed, reused, key, stats)


def probe_stats(spec: PlanSpec, records: list[dict], key: str | None, neighbour: dict) -> dict:
    """plan.json's ``probes``: probes run, the estimate of those bracket reuse saved, and the
    configurations whose max rate fell below their smaller-pool neighbour's by more than the
    tolerance (where "a larger pool is never worse" did not hold)."""
    by_index = {r["index"]: r for r in records}
    below = []
    for r in records:
        n = neighbour.get(r["index"])
        lower = by_index[n] if n is not None else None
        if lower is not None and lower["status"] == "feasible" and (
                r["status"] == "slo-unreachable"
                or (r["status"] == "feasible" and r["max_rate"] < lower["max_rate"] * (1 - spec.search.tolerance))):
            below.append(r["index"])
    warm = [r for r in records if r["start_rate"] is not None]
    return {"run": sum(r["num_probes"] for r in records), "reuse_key": key if spec.search.reuse else None,
            "warm_started": len(warm), "saved_estimate": sum(r["probes_saved_estimate"] or 0 for r in warm),
            "below_smaller_pool": below}


def run_configs(spec: PlanSpec, workers: int, on_done=None) -> list[dict]:
    """One record per configuration, in the space's order, on a local pool of ``workers``."""
    from sim.sweep.executors import ExecutorKind, make_executor

    if workers < 1:
        raise ConfigError("--workers", str(workers), "must be at least 1")
    return run_plan(spec, make_executor(ExecutorKind.LOCAL, workers), on_done=on_done).records

"""Run every configuration's search, each in one worker of a local process pool (the
sweep's ``spawn`` workers, which die with their parent: sim/sweep/executors.py)."""

from __future__ import annotations

from sim.errors import ConfigError
from sim.plan.search import evaluate_config
from sim.plan.spec import PlanSpec
from sim.sweep.executors import run_local


def run_configs(spec: PlanSpec, workers: int, on_done=None) -> list[dict]:
    """One record per configuration, in the space's order; ``on_done(record)`` as each finishes."""
    if workers < 1:
        raise ConfigError("--workers", str(workers), "must be at least 1")
    records: dict[int, dict] = {}

    def done(record: dict) -> None:
        records[record["index"]] = record
        if on_done is not None:
            on_done(record)

    tasks = [(c, spec.slo, spec.search) for c in spec.configs]
    run_local(tasks, done, workers if len(tasks) > 1 else 1, fn=evaluate_config)
    return [records[c.index] for c in spec.configs]

"""Run every configuration's search, each in one worker of a local process pool (the
sweep's ``spawn`` workers, which die with their parent: sim/sweep/executors.py)."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from sim.errors import ConfigError
from sim.plan.search import evaluate_config
from sim.plan.spec import PlanSpec
from sim.sweep.executors import _init_worker, _kill_workers, _sigterm_raises


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
    if workers == 1 or len(tasks) == 1:
        for task in tasks:
            done(evaluate_config(*task))
    else:
        pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_init_worker,
                                   initargs=(os.getpid(),), mp_context=multiprocessing.get_context("spawn"))
        finished = False
        try:
            with _sigterm_raises():
                pending = {pool.submit(evaluate_config, *task) for task in tasks}
                while pending:
                    ready, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in ready:
                        done(fut.result())
            finished = True
        finally:
            if not finished:  # Ctrl-C, SIGTERM or a failure: no worker outlives this call
                _kill_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)
    return [records[c.index] for c in spec.configs]

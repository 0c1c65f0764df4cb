"""Where a sweep's points run: a local process pool, or Ray.

An executor is a callable ``executor(tasks, on_result)``: ``tasks`` are argument tuples of
:func:`sim.sweep.runner.run_point`; ``on_result(record)`` is called in the calling process as
each point finishes, in completion order (results.csv is ordered by the grid, not by
this). Neither executor retries: ``run_point`` never raises, it records the crash.

The local pool uses ``spawn`` workers: no state is inherited from the parent (a forked
Ray client or rich's threads would be), so a point's result depends on its inputs only.
"""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from enum import StrEnum

from sim.errors import ConfigError
from sim.sweep.runner import run_point


class ExecutorKind(StrEnum):
    LOCAL = "local"
    RAY = "ray"


def run_local(tasks: list[tuple], on_result, workers: int) -> None:
    """A process pool of ``workers``; with one worker, points run in this process."""
    if workers <= 1:
        for task in tasks:
            on_result(run_point(*task))
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_ignore_sigint,
                               mp_context=multiprocessing.get_context("spawn"))
    try:
        pending = {pool.submit(run_point, *task) for task in tasks}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                on_result(fut.result())
    finally:
        # On Ctrl-C: drop queued points, let running ones finish in the background.
        pool.shutdown(wait=True, cancel_futures=True)


def _ignore_sigint() -> None:
    """Ctrl-C is the parent's to handle: a worker finishes its point instead of dying noisily."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_ray(tasks: list[tuple], on_result, workers: int, address: str | None) -> None:
    """Run each point as a Ray task (1 CPU each) on ``address``, or on a local Ray.

    A local Ray gets ``workers`` CPUs. On a cluster, every node needs kvsim installed and
    the scenario's data files (traces, empirical lengths) at the same paths.
    """
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor", "ray", "Ray is not installed; pip install 'kvsim[ray]'") from None
    started = not ray.is_initialized()
    if started:
        kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level="error",
                      configure_logging=True)
        try:
            if address:
                ray.init(address=address, **kwargs)
            else:
                ray.init(num_cpus=workers, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError("--ray-address", address or "<local>", f"cannot start Ray: {exc}") from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_point)
        pending = [remote.remote(*task) for task in tasks]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                on_result(ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def make_executor(kind: ExecutorKind, workers: int, ray_address: str | None = None):
    if workers < 1:
        raise ConfigError("--workers", str(workers), "must be at least 1")
    if kind == ExecutorKind.RAY:
        return lambda tasks, on_result: run_ray(tasks, on_result, workers, ray_address)
    if ray_address:
        raise ConfigError("--ray-address", ray_address, "only with --executor ray")
    return lambda tasks, on_result: run_local(tasks, on_result, workers)

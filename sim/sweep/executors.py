"""Where a sweep's points run: a local process pool, or Ray.

An executor is a callable ``executor(tasks, on_result)``: ``tasks`` are argument tuples of
:func:`sim.sweep.runner.run_point`; ``on_result(record)`` is called in the calling process as
each point finishes, in completion order (results.csv is ordered by the grid, not by
this). Neither executor retries: ``run_point`` never raises, it records the crash.

The local pool uses ``spawn`` workers: no state is inherited from the parent (a forked
Ray client or rich's threads would be), so a point's result depends on its inputs only.

Workers die with their parent: on Ctrl-C or SIGTERM the parent kills its workers before
it exits (finished points are saved; running ones rerun with ``--resume``), and a worker
whose parent dies without cleaning up (SIGKILL) notices within a fraction of a second
and exits.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from enum import StrEnum

from sim.errors import ConfigError
from sim.sweep.ray_executor import DEFAULT_RAY_TIMEOUT_S, MAX_RAY_TIMEOUT_S, connect_ray, run_ray
from sim.sweep.runner import run_point

#: How often a worker checks that its parent is alive (seconds).
PARENT_POLL_S = 0.2


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread while points run (handled like Ctrl-C)."""


class ExecutorKind(StrEnum):
    LOCAL = "local"
    RAY = "ray"


def run_local(tasks: list[tuple], on_result, workers: int, fn=run_point) -> None:
    """``fn(*task)`` for every task (a sweep's points by default; ``sim plan`` passes its
    configurations' searches) on a process pool of ``workers`` whose processes die with
    this one; with one worker, in this process. ``fn`` must be a module-level function."""
    if workers <= 1:
        for task in tasks:
            on_result(fn(*task))
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_init_worker,
                               initargs=(os.getpid(),), mp_context=multiprocessing.get_context("spawn"))
    finished = False
    try:
        with _sigterm_raises():
            pending = {pool.submit(fn, *task) for task in tasks}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    on_result(fut.result())
        finished = True
    finally:
        if not finished:  # Ctrl-C, SIGTERM or a failure: no worker outlives this call
            _kill_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout=5)


@contextmanager
def _sigterm_raises():
    """In the main thread, SIGTERM raises :class:`Terminated` (so ``finally`` runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _init_worker(parent_pid: int) -> None:
    """Ctrl-C is the parent's to handle (it kills the workers); a worker exits as soon as
    its parent is gone, even when the parent was killed without cleaning up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="kvsim-parent-watch",
                     daemon=True).start()


def _exit_with_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


class Executor:
    """``executor(tasks, on_result)``; ``start()`` connects to Ray now (a bad address fails
    before any file is written) and ``close()`` shuts down what ``start()`` started."""

    def __init__(self, kind: ExecutorKind, workers: int, ray_address: str | None,
                 ray_timeout_s: float) -> None:
        self.kind, self.workers, self.ray_address, self.ray_timeout_s = kind, workers, ray_address, ray_timeout_s
        self._started_ray = False

    def start(self) -> None:
        if self.kind == ExecutorKind.RAY:
            self._started_ray = connect_ray(self.ray_address, self.workers, self.ray_timeout_s) or self._started_ray

    def close(self) -> None:
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False

    def __call__(self, tasks: list[tuple], on_result, fn=run_point) -> None:
        """``fn(*task)`` per task: a sweep's points by default (``sim plan`` passes its own)."""
        if self.kind == ExecutorKind.RAY:
            run_ray(tasks, on_result, self.workers, self.ray_address, self.ray_timeout_s, fn=fn)
        else:
            run_local(tasks, on_result, self.workers, fn=fn)


def make_executor(kind: ExecutorKind, workers: int, ray_address: str | None = None,
                  ray_timeout_s: float | None = None) -> Executor:
    if workers < 1:
        raise ConfigError("--workers", str(workers), "must be at least 1")
    if kind != ExecutorKind.RAY:
        if ray_address:
            raise ConfigError("--ray-address", ray_address, "only with --executor ray")
        if ray_timeout_s is not None:
            raise ConfigError("--ray-timeout", str(ray_timeout_s), "only with --executor ray")
    timeout = DEFAULT_RAY_TIMEOUT_S if ray_timeout_s is None else ray_timeout_s
    if not 0 < timeout <= MAX_RAY_TIMEOUT_S:  # (NaN fails too)
        raise ConfigError("--ray-timeout", str(timeout), f"must be a positive number of seconds, at most "
                          f"{MAX_RAY_TIMEOUT_S:,.0f} (a day)")
    return Executor(kind, workers, ray_address, timeout)

"""Running a sweep's points on Ray: joining a cluster (or starting a local Ray) within a
bounded time, then one Ray task per point.

An unreachable ``--ray-address`` never hangs: ``host:port`` (or ``ray://host:port``) is
first probed with a plain TCP connection, then joining (``ray.init``, in a helper thread)
runs under the same time limit (``--ray-timeout``); either failing is one ``error:`` line.
"""

from __future__ import annotations

import os
import socket
import threading

from sim.errors import ConfigError
from sim.sweep.runner import run_point

#: Seconds to reach a Ray cluster before giving up (``sim sweep --ray-timeout``).
DEFAULT_RAY_TIMEOUT_S = 30.0
#: The longest --ray-timeout taken: a bound a typo (1e300, inf) cannot pass.
MAX_RAY_TIMEOUT_S = 86_400.0


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor", "ray", "Ray is not installed; pip install 'kvsim[ray]'") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` of an address Ray would dial, or None (``auto``, ``local``, no port)."""
    rest = address.strip()
    default = None
    if rest.startswith("ray://"):
        rest, default = rest[len("ray://"):], 10001
    if rest in ("auto", "local", "") or "://" in rest:
        return None
    host, sep, port = rest.rpartition(":")
    if not sep:
        return (rest, default) if default else None
    if not port.isdigit():
        raise ConfigError("--ray-address", address, "expected host:port (e.g. 10.0.0.5:6379) or "
                          "ray://host:10001")
    return host.strip("[]"), int(port)


def _probe(address: str, timeout_s: float) -> None:
    target = _host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=timeout_s):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError("--ray-address", address, f"cannot reach a Ray cluster there ({why} after at "
                          f"most {timeout_s:g} s); check the head node's host:port and that it is up") from None


def connect_ray(address: str | None, workers: int, timeout_s: float = DEFAULT_RAY_TIMEOUT_S) -> bool:
    """Join the Ray cluster at ``address`` (or start a local Ray with ``workers`` CPUs)
    within ``timeout_s`` seconds; True when this call initialised Ray (the caller shuts it
    down). Raises ConfigError in a bounded time when it cannot."""
    if not 0 < timeout_s <= MAX_RAY_TIMEOUT_S:  # (NaN fails too)
        raise ConfigError("--ray-timeout", str(timeout_s), f"must be a positive number of seconds, at most "
                          f"{MAX_RAY_TIMEOUT_S:,.0f} (a day)")
    ray = _import_ray()
    if ray.is_initialized():
        return False
    where = address or "<local>"
    if address:
        _probe(address, timeout_s)
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")  # no retry warnings on stderr
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level="error", configure_logging=True)
    if not address:
        # A local Ray starts in this thread: Ray ties its processes' lives to the thread
        # that starts them (a helper thread's exit would kill them). Ray bounds this itself.
        try:
            ray.init(num_cpus=workers, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError("--ray-address", where, f"cannot start Ray: {_first_line(exc)}") from None
        return True
    kwargs["address"] = address  # joining a cluster starts no process: a helper thread may wait
    outcome: dict = {}

    def init() -> None:
        try:
            ray.init(**kwargs)
            outcome["ok"] = True
        except BaseException as exc:  # noqa: BLE001 -- reported below, in the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=init, name="kvsim-ray-init", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ConfigError("--ray-address", where, f"no Ray cluster answered within {timeout_s:g} s "
                          "(--ray-timeout); check the address and that the cluster is up")
    if "error" in outcome:
        raise ConfigError("--ray-address", where, f"cannot join Ray: {_first_line(outcome['error'])}")
    return True


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def run_ray(tasks: list[tuple], on_result, workers: int, address: str | None,
            timeout_s: float = DEFAULT_RAY_TIMEOUT_S, fn=run_point) -> None:
    """Run each point as a Ray task (1 CPU each) on ``address``, or on a local Ray.
    ``fn(*task)`` is a sweep's ``run_point`` by default (``sim plan`` passes its
    configurations' searches); it must be a module-level function.

    A local Ray gets ``workers`` CPUs. On a cluster, every node needs kvsim installed and
    the scenario's data files (traces, empirical lengths) at the same paths. When Ray is
    already initialised (``connect_ray`` earlier), it is used and left running.
    """
    started = connect_ray(address, workers, timeout_s)
    ray = _import_ray()
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        pending = [remote.remote(*task) for task in tasks]
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    on_result(ray.get(ref))
        finally:
            for ref in pending:  # interrupted: stop the points still queued or running
                ray.cancel(ref, force=True)
    finally:
        if started:
            ray.shutdown()

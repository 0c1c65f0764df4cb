"""Assembling and running ``sim serve``: the scenario's engines (one, or ``cluster.num_replicas``
behind kvsim's router), their shared scaled clock, the HTTP server, and the drain on
SIGINT/SIGTERM (stop accepting, finish what is in flight, return 0; a second signal stops
at once, leaving what was in flight counted in flight).
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

from sim.engine.cluster.router import Router
from sim.engine.parts import build_parts, replica_parts
from sim.errors import ConfigError
from sim.serve.engine import ServedEngine


class SimClock:
    """Simulated seconds on the event loop's clock: ``(loop.time() - t0) * scale``."""

    def __init__(self, scale: float, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.scale = scale
        self.loop = loop or asyncio.get_running_loop()
        self.t0 = self.loop.time()

    def now(self) -> float:
        return (self.loop.time() - self.t0) * self.scale

    def wall_delay(self, t: float) -> float:
        """Wall seconds until simulated time ``t`` (negative: it has passed)."""
        return self.t0 + t / self.scale - self.loop.time()

    async def until(self, t: float) -> None:
        delay = self.wall_delay(t)
        if delay > 0:
            await asyncio.sleep(delay)


def refuse_unserved(sc) -> None:
    """What ``sim serve`` does not run: one ConfigError line naming the key."""
    src = sc.source_path
    if sc.engine.pipeline_parallel_size > 1:
        raise ConfigError(src, "engine.pipeline_parallel_size",
                          "sim serve runs single-stage engines: set it to 1 (pipeline stages run with `sim run`)")
    if sc.cluster.disaggregation is not None:
        raise ConfigError(src, "cluster.disaggregation",
                          "sim serve runs replicas behind one router, not prefill/decode pools: remove it "
                          "(disaggregation runs with `sim run`)")
    if sc.kv.offload is not None:
        raise ConfigError(src, "kv.offload", "sim serve does not model the CPU offload tier's loads: remove it "
                                             "(it runs with `sim run`)")


@dataclass
class Served:
    """What ``serve`` built: the engines and the HTTP side (tests read both)."""

    engines: list
    server: object
    clock: SimClock


def build_served(sc, time_scale: float, max_waiting: int | None, model_name: str | None) -> Served:
    """The engines of scenario ``sc`` on a clock started now (call inside the event loop)."""
    from sim.serve.app import Server

    refuse_unserved(sc)
    first = build_parts(sc)
    parts = [first] + [replica_parts(first) for _ in range(sc.cluster.num_replicas - 1)]
    clock = SimClock(time_scale)
    engines = [ServedEngine(p, clock, max_waiting, name=str(i)) for i, p in enumerate(parts)]
    router = Router(sc.cluster, engines) if len(engines) > 1 else None
    server = Server(engines, clock, router, model_name or sc.model, first.sc.engine.max_model_len)
    return Served(engines, server, clock)


async def serve(sc, *, host: str, port: int, time_scale: float, max_waiting: int | None = None,
                model_name: str | None = None, ready=None, stop: asyncio.Event | None = None) -> Served:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set), then drain; returns what was served.
    ``ready(port)`` is called once the socket listens (port 0: a free one is picked)."""
    from aiohttp import web

    served = build_served(sc, time_scale, max_waiting, model_name)
    stop = stop or asyncio.Event()
    force = asyncio.Event()  # a second signal: stop waiting for what is in flight
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        (force if stop.is_set() else stop).set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    tasks = [asyncio.create_task(e.run()) for e in served.engines]
    runner = web.AppRunner(served.server.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        for t in tasks:
            t.cancel()
        raise ConfigError("--port", str(port), f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    if ready is not None:
        ready(site._server.sockets[0].getsockname()[1])
    await stop.wait()
    drained = asyncio.create_task(drain(served, tasks))
    forced = asyncio.create_task(force.wait())
    await asyncio.wait((drained, forced), return_when=asyncio.FIRST_COMPLETED)
    if not drained.done():  # forced: what is in flight stays in flight
        drained.cancel()
        for t in tasks:
            t.cancel()
    forced.cancel()
    await runner.cleanup()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    return served


async def drain(served: Served, tasks: list) -> None:
    """Stop accepting, let the engines finish what is in flight and the handlers write it."""
    served.server.draining = True
    for e in served.engines:
        e.stop()
    await asyncio.gather(*tasks)
    for e in served.engines:  # what can never run (it would need more KV than is free): told so
        for ticket in e.tickets.values():
            if not ticket.closed:
                ticket.closed = True
                ticket.push(("rejected", "server_stopped"))
    while served.server.active:
        await asyncio.sleep(0.01)

"""Assembling and running ``sim serve``: the scenario's engines (one, or ``cluster.num_replicas``
behind kvsim's router on one port, or each on a port of its own for an external router:
``replica_ports``), their shared scaled clock (one process, one event loop: one simulated
cluster), the HTTP servers, and the drain on SIGINT/SIGTERM (stop accepting, finish what is
in flight, return 0; a second signal stops at once, leaving what was in flight counted in
flight).
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

from sim.engine.cluster.router import Router
from sim.engine.parts import build_parts, replica_parts
from sim.errors import ConfigError
from sim.serve.engine import ServedEngine
from sim.serve.identity import PrefixIdentity


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
    """What ``serve`` built: the engines and the HTTP side, one server per port (tests read both)."""

    engines: list
    servers: list
    clock: SimClock
    identity: PrefixIdentity
    ports: list[int] | None = None  # where each server listened (port 0: the one picked)
    external: bool = False  # each replica on a port of its own: an external router routed them

    @property
    def server(self):
        return self.servers[0]


def replica_port_list(spec: str | None, port: int, replicas: int) -> list[int] | None:
    """``--replica-ports``: None (off); "" (the flag alone: ``port``, ``port + 1``, ...; port 0:
    each a free one); or a comma-separated list of ``replicas`` ports."""
    if spec is None:
        return None
    if spec == "":
        if port and port + replicas - 1 > 65535:
            raise ConfigError("--replica-ports", str(port), f"{replicas} ports from {port} pass 65535")
        return [port + i if port else 0 for i in range(replicas)]
    try:
        ports = [int(p) for p in spec.split(",")]
    except ValueError:
        raise ConfigError("--replica-ports", spec, "must be a comma-separated list of ports (or the flag "
                                                   "alone: --port, --port + 1, ...)") from None
    if len(ports) != replicas or not all(0 <= p <= 65535 for p in ports):
        raise ConfigError("--replica-ports", spec, f"must list {replicas} ports (one per replica), each 0..65535")
    if len(set(p for p in ports if p)) != len([p for p in ports if p]):
        raise ConfigError("--replica-ports", spec, "lists a port twice")
    return ports


def build_served(sc, time_scale: float, max_waiting: int | None, model_name: str | None,
                 external: bool = False, tokenizer=None) -> Served:
    """The engines of scenario ``sc`` on a clock started now (call inside the event loop);
    ``external``: a server per engine, no router (each replica on a port of its own)."""
    from sim.serve.app import Server

    refuse_unserved(sc)
    first = build_parts(sc)
    parts = [first] + [replica_parts(first) for _ in range(sc.cluster.num_replicas - 1)]
    clock = SimClock(time_scale)
    identity = PrefixIdentity()
    engines = [ServedEngine(p, clock, max_waiting, name=str(i), identity=identity) for i, p in enumerate(parts)]
    name, max_len = model_name or sc.model, first.sc.engine.max_model_len
    if external:
        servers = [Server([e], clock, None, name, max_len, tokenizer) for e in engines]
    else:
        router = Router(sc.cluster, engines) if len(engines) > 1 else None
        servers = [Server(engines, clock, router, name, max_len, tokenizer)]
    return Served(engines, servers, clock, identity, external=external)


async def serve(sc, *, host: str, port: int, time_scale: float, max_waiting: int | None = None,
                model_name: str | None = None, ready=None, stop: asyncio.Event | None = None,
                replica_ports: list[int] | None = None, tokenizer=None) -> Served:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set), then drain; returns what was served.
    ``replica_ports``: replica i listens on ``replica_ports[i]`` (else all on ``port``).
    ``ready(ports)`` is called once the sockets listen (port 0: a free one is picked)."""
    from aiohttp import web

    served = build_served(sc, time_scale, max_waiting, model_name, external=replica_ports is not None,
                          tokenizer=tokenizer)
    ports = replica_ports if replica_ports is not None else [port]
    stop = stop or asyncio.Event()
    force = asyncio.Event()  # a second signal: stop waiting for what is in flight
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        (force if stop.is_set() else stop).set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    tasks = [asyncio.create_task(e.run()) for e in served.engines]
    runners, served.ports = [], []
    for server, p in zip(served.servers, ports):
        runner = web.AppRunner(server.app(), handler_cancellation=True, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, host, p)
        try:
            await site.start()
        except OSError as e:
            for r in runners:
                await r.cleanup()
            for t in tasks:
                t.cancel()
            flag = "--replica-ports" if replica_ports is not None else "--port"
            raise ConfigError(flag, str(p), f"cannot listen on {host}:{p}: {e.strerror or e}") from None
        served.ports.append(site._server.sockets[0].getsockname()[1])
    if ready is not None:
        ready(list(served.ports))
    await stop.wait()
    drained = asyncio.create_task(drain(served, tasks))
    forced = asyncio.create_task(force.wait())
    await asyncio.wait((drained, forced), return_when=asyncio.FIRST_COMPLETED)
    if not drained.done():  # forced: what is in flight stays in flight
        drained.cancel()
        for t in tasks:
            t.cancel()
    forced.cancel()
    for runner in runners:
        await runner.cleanup()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    return served


async def drain(served: Served, tasks: list) -> None:
    """Stop accepting, let the engines finish what is in flight and the handlers write it."""
    for server in served.servers:
        server.draining = True
    for e in served.engines:
        e.stop()
    await asyncio.gather(*tasks)
    for e in served.engines:  # what can never run (it would need more KV than is free): told so
        for ticket in e.tickets.values():
            if not ticket.closed:
                ticket.closed = True
                ticket.push(("rejected", "server_stopped"))
    while any(server.active for server in served.servers):
        await asyncio.sleep(0.01)

"""One simulated engine on an asyncio loop's scaled wall clock (``sim serve``).

The engine is the simulator's own: the scheduler, KV allocator, cost model and front end
built by ``sim.engine.parts.build_parts``, and every step the shared
:class:`~sim.engine.step.engine_step.EngineStep` with the cost model's predictions
(``PredictedRunner``), as ``sim run`` drives it. Only the clock differs. Simulated time is
``(loop.time() - t0) * time_scale``; a request arrives at the simulated time its HTTP request
came in, and the engine keeps its own time ``t`` exactly as the SimPy loop would:

* a step starts when the previous one ended (or, idle, when the first request reaches the
  engine), ends its predicted time later, and the loop sleeps until the wall clock gets
  there; requests that arrived by a step's start are in the scheduler for it, later ones
  wait for the next (as SimPy's events within a step);
* its tokens are handed to their requests' tickets stamped with the step's end (through
  the front end's CPU where the profile has one: sim/engine/step/frontend.py), and each
  HTTP handler writes them when the wall clock reaches that time.

If the loop falls behind the wall clock (a slow machine, a huge batch of clients), the
simulated timeline stays exact and only the delivery is late: ``lag_s`` says by how much.

Every request ends in exactly one of: completed, rejected (with the scheduler's reason, or
``queue_full`` past ``max_waiting``), aborted (the client went away: it leaves the engine at
the next step boundary, its KV freed, and is counted as rejected with reason
``client_abort`` in the run's summary), or is in flight.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import deque

from sim.engine.logs.itl import ItlLog
from sim.engine.logs.metrics import StepLog
from sim.engine.logs.request_log import RequestLog, Tally
from sim.engine.step.engine_step import EngineStep, PredictedRunner
from sim.engine.step.frontend import FrontEnd
from sim.request import Request, RequestStatus
from sim.serve.stats import ServeStats

ABORT_REASON = "client_abort"
QUEUE_FULL = "queue_full"


class Ticket:
    """A request's events for its HTTP handler, in order: ("token", t), then ("done", t),
    or ("rejected", reason); ``t`` is the simulated time the client gets it."""

    __slots__ = ("req", "events", "_wake", "closed")

    def __init__(self, req: Request) -> None:
        self.req = req
        self.events: deque = deque()
        self._wake = asyncio.Event()
        self.closed = False  # done, rejected or aborted: no more events

    def push(self, event: tuple) -> None:
        self.events.append(event)
        self._wake.set()

    async def next(self) -> tuple:
        while not self.events:
            self._wake.clear()
            await self._wake.wait()
        return self.events.popleft()


class _NoTurns:
    """A served request has no follow-up turn: the client sends the next one itself."""

    @staticmethod
    def next_turn(req: Request):
        return None


class ServedEngine:
    """The engine of ``parts`` serving requests on a clock shared through ``clock``."""

    def __init__(self, parts, clock, max_waiting: int | None = None, name: str = "", identity=None) -> None:
        self.parts, self.clock, self.max_waiting, self.name = parts, clock, max_waiting, name
        self.identity = identity  # the replicas' PrefixIdentity (sim/serve/identity.py): arrivals.csv's rows
        self.sc = parts.sc
        self.scheduler = sched = parts.scheduler
        self.allocator = parts.allocator
        self.requests = RequestLog()
        self._done: list[Request] = []
        sched.finished = Tally(self._done.append)
        sched.rejected = Tally(self._on_rejected)
        profile = parts.profile
        self.frontend = FrontEnd(profile, self.sc.engine.api_servers) if profile.has_frontend else None
        self.core = EngineStep(sched, parts.allocator, _NoTurns(), StepLog(), PredictedRunner(parts.cost),
                               clock=lambda: self.t)
        self.itl = ItlLog()  # the gaps summary.json gives (sim/engine/logs/itl.py), as a Simulation keeps them
        if self.frontend is not None:
            self.frontend.itl = self.itl
        else:
            self.core.itl = self.itl
        self.t = 0.0  # the engine's simulated time: the end of its last step, or its last wake-up
        self._arrived: deque[Request] = deque()  # stamped, not yet through the front end's intake
        self._pending: list = []  # (reaches the engine at, request id, request): heap
        self.tickets: dict[int, Ticket] = {}
        self._aborts: list[Request] = []
        self._wake = asyncio.Event()
        self.stopping = False
        self.stats = ServeStats()
        self.lag_s = 0.0  # the most the loop has fallen behind the wall clock (simulated seconds)

    # -- what the HTTP side calls ----------------------------------------------------------

    def outstanding(self) -> int:
        """Requests routed here and not yet done (the router's least-outstanding reads it)."""
        return len(self._arrived) + len(self._pending) + self.scheduler.num_unfinished

    def submit(self, req: Request) -> Ticket:
        """``req`` (its arrival already stamped) arrives; its ticket carries what happens to it."""
        req.request_id = len(self.requests)
        self.requests.append(req)
        ticket = self.tickets[req.request_id] = Ticket(req)
        self._arrived.append(req)
        if self.identity is not None:
            self.identity.add(req)
        self.stats.arrived += 1
        self._wake.set()
        return ticket

    def abort(self, ticket: Ticket) -> None:
        """The client went away: the request leaves the engine at the next step boundary."""
        if not ticket.closed:
            ticket.closed = True
            self._aborts.append(ticket.req)
            self._wake.set()

    def stop(self) -> None:
        """Drain: finish what is in flight, then ``run`` returns."""
        self.stopping = True
        self._wake.set()

    # -- the engine loop ---------------------------------------------------------------------

    async def _until(self, t: float) -> None:
        """Sleep until the wall clock reaches simulated time ``t``."""
        delay = self.clock.wall_delay(t)
        if delay <= 0:  # behind: still let the HTTP side run (write tokens, take requests) once
            self.lag_s = max(self.lag_s, -delay * self.clock.scale)
        await asyncio.sleep(max(delay, 0.0))

    def _receive(self, t: float) -> None:
        """The front end's intake of the requests that arrived by ``t``, in arrival order: the
        simulation's order of events (an arrival within a step is taken in before the step's
        tokens are streamed, one after it after them), whenever the loop gets to them."""
        arrived, fe, pending = self._arrived, self.frontend, self._pending
        while arrived and arrived[0].arrival_s <= t:
            req = arrived.popleft()
            ready = fe.receive(req.arrival_s, req.num_prompt_tokens) if fe is not None else req.arrival_s
            heapq.heappush(pending, (ready, req.request_id, req))

    async def _idle(self) -> bool:
        """Wait for a request to reach the engine; False when draining and nothing is left."""
        while not self._pending and not self._arrived:
            if self._aborts:
                return True  # the loop takes them out: that may free what a stuck step needs
            if self.stopping:
                return False
            self._wake.clear()
            await self._wake.wait()
        if not self._pending:
            self._receive(self._arrived[0].arrival_s)
        ready = self._pending[0][0]
        if ready > self.t:  # (the front end still holds it)
            await self._until(ready)
            self.t = ready
        return True

    async def run(self) -> None:
        core, sched = self.core, self.scheduler
        stuck = False  # the last step could run nothing: wait for an arrival
        while True:
            if stuck or not sched.has_work():
                if not await self._idle():
                    return
                stuck = False
            self._receive(self.t)
            self._admit(self.t)
            if self._aborts:
                self._apply_aborts()
            if not sched.has_work():
                continue
            step = core.begin()
            end = step.start_s
            for wait in step.waits:
                end += wait.seconds
            await self._until(end)
            self.t = end
            self._receive(end)
            after = core.end(step, end)
            if step.ran:
                self._deliver(end, after.finished)
            elif not after.retry:
                stuck = True
            self.stats.steps += 1

    def _admit(self, t: float) -> None:
        pending, sched = self._pending, self.scheduler
        while pending and pending[0][0] <= t:
            _, _, req = heapq.heappop(pending)
            if self.tickets.get(req.request_id) is None or self.tickets[req.request_id].closed:
                sched._reject(req, ABORT_REASON)  # went away in the front end
            elif self.max_waiting is not None and len(sched.waiting) >= self.max_waiting:
                sched._reject(req, QUEUE_FULL)
            else:
                sched.add_request(req)

    def _deliver(self, end: float, finished: list[Request]) -> None:
        sampled = self.scheduler.sampled
        at = end
        if self.frontend is not None:
            self.frontend.stream(end, sampled, finished)
            if sampled:
                at = self.frontend.free_at
        tickets = self.tickets
        for req in sampled:
            ticket = tickets.get(req.request_id)
            if ticket is not None and not ticket.closed:
                ticket.push(("token", at))
                self.stats.token(req, at)
        for req in finished:
            ticket = tickets.pop(req.request_id, None)
            done_at = req.client_last_s if req.client_last_s is not None else req.finish_s
            if ticket is not None and not ticket.closed:
                ticket.closed = True
                ticket.push(("done", done_at))
            self.stats.finished(req, done_at)
        if self._done:
            retire = self.requests.retire
            for req in self._done:
                retire(req)
            self._done.clear()

    def _on_rejected(self, req: Request) -> None:
        ticket = self.tickets.pop(req.request_id, None)
        if ticket is not None and req.reject_reason != ABORT_REASON:
            ticket.closed = True
            ticket.push(("rejected", req.reject_reason))
        self.stats.rejected(req.reject_reason)
        self.stats.forget(req.request_id)
        self.requests.retire(req)

    def _apply_aborts(self) -> None:
        """Take the aborted requests out of the engine (between steps), freeing their KV."""
        sched = self.scheduler
        for req in self._aborts:
            status = req.status
            if status in (RequestStatus.FINISHED, RequestStatus.REJECTED):
                continue  # done already (or rejected: its ticket said so)
            if req in sched.waiting:
                sched.waiting.remove(req)
            elif req in sched.swapped:
                sched.swapped.remove(req)
                self.parts.swap.release(req.request_id)
                self.parts.preemptor._swapped_blocks.pop(req.request_id, None)
            elif req in sched.running:
                sched.running.remove(req)
                sched._release(req)
            else:
                continue  # still in the front end: rejected as aborted when it reaches the engine
            sched._reject(req, ABORT_REASON)
        self._aborts.clear()

    # -- what /metrics reads -----------------------------------------------------------------

    def in_flight(self) -> int:
        return self.stats.arrived - self.stats.completed - sum(self.stats.rejects.values())

    def kv_usage(self) -> float:
        alloc = self.allocator
        return alloc.num_allocated_slots() / alloc.num_total_slots if alloc.num_total_slots else 0.0

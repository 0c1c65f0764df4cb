"""One engine of a cluster (sim/engine/cluster/simulation.py): a Simulation on the cluster's clock, fed by
its router, and when it may next be read or fed from outside its engine loop (its
macro-steps run off the clock until then: sim/engine/macro/run.py)."""

from __future__ import annotations

from collections import deque
from sim.engine.parts import EngineParts
from sim.engine.simulation import SimResult, Simulation
from sim.request import Request
from sim.workload.generate import SessionSpec

class Replica(Simulation):
    """One engine of a cluster: a Simulation on the cluster's clock, fed by its router.
    ``role``: ``prefill`` or ``decode`` in a disaggregated cluster (sim/engine/disagg/handoff.py)."""

    macro_straddles = False  # the router reads replicas between their steps (sim/engine/macro/run.py)

    def __init__(self, cluster, index: int, parts: EngineParts,  # noqa: PLW0231
                 role: str | None = None) -> None:
        """``cluster``: the :class:`~sim.engine.cluster.simulation.ClusterSimulation` it belongs to."""
        self.cluster, self.index, self.role = cluster, index, role
        # macro-steps go on the clock around the times the router may read or feed this
        # replica (``next_input_s``); a disaggregated pool's hand-offs are left to the normal path
        self.macro_stepwise = role is None
        # A prefill replica runs prefill copies sharing their request's id: they must not be
        # retired into the cluster's request log (sim/engine/logs/request_log.py) in its place.
        self._assemble(parts, cluster.env, cluster.driver, None, cluster.macro_steps,
                       keep_requests=role == "prefill")
        self.requests: list[Request] = []  # the requests routed here, in arrival order
        self._feeds: deque[float] = deque()  # when requests in the front end reach the scheduler (FIFO)
        self.progress = None  # set by ClusterSimulation.run when the cluster reports progress
        self.on_rejected = None  # called with a request its scheduler rejected on arrival

    def outstanding(self) -> int:
        """Requests in flight here: queued, running, swapped out, or still in the front end."""
        sched = self.scheduler
        return len(self.requests) - len(sched.finished) - len(sched.rejected)

    def accept(self, req: Request) -> None:
        """``req`` was routed here: through the front end (if any) to the scheduler."""
        self.requests.append(req)
        if self.frontend is not None:
            self.env.process(self._through_frontend(req))
        else:
            self._enqueue(req)

    def _through_frontend(self, req: Request):
        now = self.env.now
        ready = self.frontend.receive(now, req.num_prompt_tokens)
        if ready > now:
            self._feeds.append(now + (ready - now))  # when the timeout below fires
            yield self.env.timeout(ready - now)
            self._feeds.popleft()
        self._enqueue(req)

    def next_input_s(self) -> float:
        """The earliest time this replica may next be read or fed from outside its engine
        loop: the router's next pick (of any replica, or of this one under round-robin), or a
        request reaching its scheduler from its front end; -inf when that is not known ahead
        (a follow-up turn may be routed after any step). Its macro-steps run off the clock
        until then (sim/engine/macro/run.py)."""
        t = self.cluster.next_pick_s(self.index)
        if self._feeds and self._feeds[0] < t:
            return self._feeds[0]
        return t

    def _enqueue(self, req: Request) -> None:
        if self.scheduler.add_request(req):
            self.wake()
        elif self.on_rejected is not None:
            self.on_rejected(req)

    def wake(self) -> None:
        """Work arrived: an engine waiting for some goes on."""
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def _submit(self, session: SessionSpec, turn: int) -> None:
        self.cluster.submit(session, turn)  # a follow-up turn goes through the router too

    def result(self, end_s: float) -> SimResult:
        return SimResult(
            scenario=self.sc, plan=self.plan, calibration_name=self.cal.name,
            calibration_source=str(self.cal.source), requests=self.requests, steps=self.steps,
            scheduler=self.scheduler, preemptor=self.preemptor, allocator=self.allocator,
            swap=self.swap, end_s=end_s, calibration_label=self.cal.source_label, profile=self.parts.profile,
            frontend=self.frontend, kernel_timing=self.cal.kernel_timing, itl=self.itl)

"""The real engine serving a workload: arrivals on the wall clock, every step the shared
:class:`sim.engine.step.engine_step.EngineStep`, batches run by the step executor.

The scheduler, allocator, workload and engine step are the simulator's own objects (built by
``sim.engine.parts.build_parts``), so the real engine decides exactly as the simulated one
would; only the clock differs: the time a batch takes is the time its kernels took, and the
next step starts when it ends. Needs no torch itself: the runner brings the model.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Callable

from sim.engine.logs.metrics import StepLog
from sim.engine.parts import EngineParts, SessionDriver
from sim.engine.step.engine_step import EngineStep, Wait, WaitKind
from sim.sched.output import SchedulerOutput


class ExecutorRunner:
    """Runs each batch on a real model (``executor.execute(out)`` returns measured seconds) and
    keeps ``timed``: (batch, measured seconds, idle seconds before it) of every batch that ran."""

    def __init__(self, executor) -> None:
        self.executor = executor
        self.timed: list[tuple[SchedulerOutput, float, float]] = []

    def swap_out(self, out: SchedulerOutput) -> float:
        return self.executor.execute(out)

    def run(self, out: SchedulerOutput, idle_before_s: float) -> tuple[Wait, ...]:
        measured = self.executor.execute(out)  # swaps, packing and forward
        self.timed.append((out, measured, idle_before_s))
        return (Wait(WaitKind.COMPUTE, measured),)


@dataclass
class RealRun:
    """What serving a workload left: every request, the step log, and the parts' final state."""

    requests: list
    steps: StepLog
    end_s: float
    allocator: object = None
    preemptor: object = None
    swap: object = None
    scheduler: object = None
    samples: list = field(default_factory=list)  # per-step comparisons, filled by whoever compares


def wall_clock() -> Callable[[], float]:
    """Seconds since this call, on the wall clock."""
    t0 = time.perf_counter()
    return lambda: time.perf_counter() - t0


def serve(parts: EngineParts, runner, *, clock: Callable[[], float] | None = None,
          sleep: Callable[[float], None] = time.sleep) -> RealRun:
    """Serve ``parts``' workload: submit each arrival once the clock has reached it, run steps
    while there is work, sleep until the next arrival when there is none.

    The waits a step's runner returns have already passed on ``clock`` when ``begin`` returns
    (the runner ran the batch), so a step ends at its start plus their sum."""
    clock = clock or wall_clock()
    driver = SessionDriver(parts.sc, parts.scheduler)
    steps = StepLog()
    core = EngineStep(parts.scheduler, parts.allocator, driver, steps, runner, clock)
    pending = [(s.arrival_s, s.session_id, 0, s) for s in parts.sessions]
    heapq.heapify(pending)

    def admit(until: float) -> None:
        while pending and pending[0][0] <= until:
            arrival, _, turn, session = heapq.heappop(pending)
            driver.submit(session, turn, arrival)  # it arrived then, even if seen late

    while pending or core.has_work():
        admit(clock())
        if not core.has_work():
            if not pending:
                break  # the last arrivals were rejected: nothing is left to serve
            sleep(max(0.0, pending[0][0] - clock()))
            continue
        step = core.begin()
        end = step.start_s
        for wait in step.waits:
            end += wait.seconds
        admit(end)  # a server's front end queued what arrived while the batch ran
        after = core.end(step, end)
        if not step.ran:
            if not after.retry:
                if not pending:
                    break  # nothing can ever run: left in flight
                sleep(max(0.0, pending[0][0] - clock()))
            continue
        for session, turn, think in after.follow_ups:
            heapq.heappush(pending, (end + think, session.session_id, turn, session))
    return RealRun(driver.requests, steps, clock(), allocator=parts.allocator, preemptor=parts.preemptor,
                   swap=parts.swap, scheduler=parts.scheduler)

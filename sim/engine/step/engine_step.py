"""The one engine step, shared by the simulator and the real engine: schedule, run the batch,
update.

:class:`EngineStep` owns every decision and every piece of bookkeeping of a step: what the
scheduler picks, when a batch counts as run, the idle time before it (which a measured
calibration's after-idle factor reads), when the "last step ended" time moves (after a
batch that only swaps requests out too), the step log, and the follow-up turns of finished
conversations. What it does not own is time. A :class:`BatchRunner` runs the batch and says
how long each part took:

* the SimPy simulation's runner (:class:`PredictedRunner`) answers with the cost model's
  predictions, and the simulation advances its clock by them;
* the real engine's runner executes the kernels and answers with the measured time, which
  has already passed on the wall clock.

A driver calls :meth:`EngineStep.begin` at the step's start, lets the returned waits pass on
its clock, then calls :meth:`EngineStep.end` with the time the step ended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Callable, Protocol

from sim.engine.logs.metrics import StepLog
from sim.engine.step.predict import predicted_step_s, predicted_transfer_s
from sim.request import Request
from sim.sched.output import SchedulerOutput


class WaitKind(StrEnum):
    TRANSFER = "transfer"  # KV swapped over the host link (serialized on it)
    COMPUTE = "compute"  # the batch's forward pass


@dataclass(frozen=True, slots=True)
class Wait:
    """A stretch of a step's time: ``seconds`` of ``kind``."""

    kind: WaitKind
    seconds: float


class BatchRunner(Protocol):
    """Runs scheduled batches: on a model of the GPU (predicted) or on a real one (measured)."""

    def swap_out(self, out: SchedulerOutput) -> float:
        """Copy out the victims of a batch that runs nothing; seconds it takes."""

    def run(self, out: SchedulerOutput, idle_before_s: float) -> tuple[Wait, ...]:
        """Run a batch (its swaps, then its forward pass) that starts ``idle_before_s`` after
        the previous step ended; the waits it takes, in order."""


class PredictedRunner:
    """The simulator's runner: each batch takes what the cost model predicts."""

    def __init__(self, cost) -> None:
        self.cost = cost

    def swap_out(self, out: SchedulerOutput) -> float:
        return predicted_transfer_s(self.cost, out)

    def run(self, out: SchedulerOutput, idle_before_s: float) -> tuple[Wait, ...]:
        waits = []
        if out.swap_out_bytes or out.swap_in_bytes:
            waits.append(Wait(WaitKind.TRANSFER, predicted_transfer_s(self.cost, out)))
        if out.scheduled:
            waits.append(Wait(WaitKind.COMPUTE, self.compute_s(out, idle_before_s)))
        return tuple(waits)

    def compute_s(self, out: SchedulerOutput, idle_before_s: float) -> float:
        """The batch's compute time (a pipeline's runner sums its stages)."""
        return predicted_step_s(self.cost, out, idle_before_s)


@dataclass(slots=True)
class Step:
    """One step in progress: the scheduler's batch and what running it takes."""

    out: SchedulerOutput
    ran: bool  # False: nothing could run (at most the victims of a preemption were copied out)
    start_s: float
    idle_before_s: float  # since the previous step ended (inf before the first step)
    waits: tuple[Wait, ...]


@dataclass(slots=True)
class StepEnd:
    """What a driver must do after a step."""

    retry: bool = False  # nothing ran, but a preemption freed memory: schedule again at once
    follow_ups: list[tuple] = field(default_factory=list)  # (session, turn, think time) to arrive
    finished: list = field(default_factory=list)  # requests that finished in the step


class EngineStep:
    """Schedule -> run the batch -> update, for any clock.

    ``hook(out)``, if given, sees every batch before it runs, and a batch that only swaps
    requests out (``sim validate`` runs the same batch on the real model there, in lockstep).
    """

    def __init__(self, scheduler, allocator, driver, steps: StepLog, runner: BatchRunner,
                 clock: Callable[[], float],
                 hook: Callable[[SchedulerOutput], None] | None = None) -> None:
        self.scheduler = scheduler
        self.allocator = allocator
        self.driver = driver
        self.steps = steps
        self.runner = runner
        self.clock = clock
        self.hook = hook
        self.last_end_s: float | None = None  # when the previous step ended (None: none yet)
        self.idle_before_s = math.inf  # idle time before the last batch that ran
        #: ``sim run --schedule``: every step's decisions (sim/engine/logs/schedule_log.py); None: not kept
        self.schedule_log = None
        #: the ITL log (sim/engine/logs/itl.py) the step's tokens go to at its end; None: not kept
        #: here (a front end's streaming stamps them: sim/engine/step/frontend.py)
        self.itl = None

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def begin(self) -> Step:
        """Schedule a batch and run it; the step's waits are still to pass on the driver's clock."""
        out = self.scheduler.schedule()
        now = self.clock()
        # A static batch whose last live member was just preempted is left with padding rows
        # only: nothing is computed, but the update ends the batch at once and its answers go out.
        if not out.scheduled and not out.decode_padding_seqs:
            waits: tuple[Wait, ...] = ()
            if out.swap_out_bytes:
                if self.hook is not None:
                    self.hook(out)  # a real engine copies the victims' blocks out now
                waits = (Wait(WaitKind.TRANSFER, self.runner.swap_out(out)),)
            elif out.tier_loads and self.hook is not None:
                self.hook(out)  # a CPU tier's loads begin (sim validate copies the blocks now)
            return Step(out, False, now, self.idle_before_s, waits)
        self.idle_before_s = math.inf if self.last_end_s is None else now - self.last_end_s
        if self.hook is not None and (out.scheduled or out.swapped_out or out.swapped_in or out.tier_loads):
            self.hook(out)
        return Step(out, True, now, self.idle_before_s, self.runner.run(out, self.idle_before_s))

    def end(self, step: Step, end_s: float) -> StepEnd:
        """Finish ``step`` at ``end_s``: the scheduler's update, the step log, follow-up turns."""
        out = step.out
        if not step.ran:
            if out.swap_out_bytes:
                self.last_end_s = end_s  # the engine was busy copying
            if self.schedule_log is not None:
                self.schedule_log.record(out, (), self.scheduler, self.allocator, step.start_s)
            # retry at once: a preemption or the async lag's releases freed memory or seats
            return StepEnd(retry=bool(out.preempted) or out.num_released > 0)
        self.last_end_s = end_s
        finished: list[Request] = self.scheduler.update_from_output(out, end_s, step.start_s)
        if self.itl is not None:
            self.itl.tokens(end_s, self.scheduler.sampled)
        if self.schedule_log is not None:
            self.schedule_log.record(out, finished, self.scheduler, self.allocator, step.start_s)
        self.steps.record(end_s, end_s - step.start_s, out, self.scheduler, self.allocator)
        if not finished:
            return _NOTHING_TO_DO
        return StepEnd(follow_ups=self.follow_ups(finished), finished=finished)

    def after_stretch_finish(self, end_s: float) -> None:
        """A macro-step stretch's step (sim/engine/macro/run.py) ending at ``end_s`` finished
        requests and freed their blocks: what ``end`` does after such a step beyond the
        scheduler's update, the step log and the follow-up turns. Nothing here."""

    def follow_ups(self, finished: list[Request]) -> list:
        """(session, turn, think time) of the next turn of each finished request that has one."""
        return [f for f in map(self.driver.next_turn, finished) if f is not None]


_NOTHING_TO_DO = StepEnd()  # shared by the many steps that finish no request (never mutated)

"""The SimPy engine: arrivals, the engine step loop, and a PCIe link for swaps.

The scheduler and allocator are plain objects (built in ``parts.py``); this module owns
time. One engine step: ask the scheduler for a batch, move swapped KV over the PCIe link
(a SimPy resource, so transfers serialize), advance the clock by the cost model's step
time, then tell the scheduler the step is done. Follow-up turns of a conversation arrive
a think time after the previous answer.

The run ends when no event is left: every arrival has happened and the engine has
drained its queues (or can make no progress, which leaves requests ``in_flight``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import simpy

from sim.kv.swap import SwapSpace
from sim.model.memory import MemoryPlan
from sim.engine.metrics import StepLog
from sim.engine.predict import predicted_step_s, predicted_transfer_s
from sim.engine.parts import (
    DTYPE_BYTES, SessionDriver, build_parts, build_plan, remaining_output_model, token_budget)
from sim.request import Request
from sim.config.scenario import Scenario
from sim.sched.output import SchedulerOutput
from sim.sched.preemption import Preemptor
from sim.workload.generate import SessionSpec



@dataclass
class SimResult:
    scenario: Scenario
    plan: MemoryPlan
    calibration_name: str
    calibration_source: str
    requests: list[Request]  # every request that arrived, in arrival order
    steps: StepLog
    scheduler: object
    preemptor: Preemptor
    allocator: object
    swap: SwapSpace
    sim_wall_s: float = 0.0
    end_s: float = 0.0
    calibration_label: str = ""  # "datasheet" or "measured YYYY-MM-DD"
    extra: dict = field(default_factory=dict)


class Simulation:
    """One run of one scenario. ``run()`` returns a :class:`SimResult`.

    ``step_hook(out)``, if given, is called with every batch before the clock advances
    (and with a batch that only swaps requests out)
    (``sim validate`` runs the same batch on the real model there, in lockstep).
    """

    def __init__(self, sc: Scenario, progress=None,
                 step_hook: Callable[[SchedulerOutput], None] | None = None) -> None:
        self.sc = sc
        parts = build_parts(sc)
        self.parts = parts
        self.model, self.cal, self.plan, self.cost = parts.model, parts.cal, parts.plan, parts.cost
        self.budget, self.allocator, self.swap = parts.budget, parts.allocator, parts.swap
        self.preemptor, self.scheduler = parts.preemptor, parts.scheduler
        self.sessions: list[SessionSpec] = parts.sessions
        self.driver = SessionDriver(sc, self.scheduler)
        self.requests = self.driver.requests
        self.steps = StepLog()
        self.progress = progress
        self.step_hook = step_hook
        self._last_end: float | None = None  # when the previous step ended (None: none yet)
        self.idle_before_s = math.inf  # idle time before the step being run (the step hook may read it)
        self.env = simpy.Environment()
        self.link = simpy.Resource(self.env, capacity=1)
        self._wakeup = self.env.event()

    # -- requests ---------------------------------------------------------------------------

    def _submit(self, session: SessionSpec, turn: int) -> None:
        if self.driver.submit(session, turn, self.env.now) and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _follow_up(self, session: SessionSpec, turn: int, think_s: float):
        yield self.env.timeout(think_s)
        self._submit(session, turn)

    def _arrivals(self):
        env = self.env
        for session in self.sessions:
            if session.arrival_s > env.now:
                yield env.timeout(session.arrival_s - env.now)
            self._submit(session, 0)

    # -- the engine loop ----------------------------------------------------------------------

    def _engine(self):
        env, sched = self.env, self.scheduler
        while True:
            if not sched.has_work():
                self._wakeup = env.event()
                yield self._wakeup
            out = sched.schedule()
            # A static batch whose last live member was just preempted is left with padding
            # rows only: nothing is computed, but the update ends the batch at once and its
            # answers go out.
            if not out.scheduled and not out.decode_padding_seqs:
                # Nothing ran. A preemption freed memory (after its swap-out, if any): try
                # again at once. Otherwise nothing can run until something arrives.
                if out.swap_out_bytes:
                    if self.step_hook is not None:
                        self.step_hook(out)  # a real engine copies the victims' blocks out now
                    yield from self._transfer(out)
                    self._last_end = env.now
                if out.preempted:
                    continue
                self._wakeup = env.event()
                yield self._wakeup
                continue
            start = env.now
            self.idle_before_s = math.inf if self._last_end is None else start - self._last_end
            if self.step_hook is not None and (out.scheduled or out.swapped_out or out.swapped_in):
                self.step_hook(out)
            if out.swap_out_bytes or out.swap_in_bytes:
                yield from self._transfer(out)
            if out.scheduled:
                yield env.timeout(predicted_step_s(self.cost, out, self.idle_before_s))
            self._last_end = env.now
            finished = sched.update_from_output(out, env.now, start)
            self.steps.record(env.now, env.now - start, out, sched, self.allocator)
            for req in finished:
                follow = self.driver.next_turn(req)
                if follow is not None:
                    env.process(self._follow_up(*follow))
            if self.progress is not None:
                self.progress(env.now, len(sched.finished) + len(sched.rejected), len(self.requests))

    def _transfer(self, out: SchedulerOutput):
        with self.link.request() as slot:
            yield slot
            yield self.env.timeout(predicted_transfer_s(self.cost, out))

    def run(self) -> SimResult:
        t0 = time.perf_counter()
        self.env.process(self._arrivals())
        self.env.process(self._engine())
        self.env.run()
        return SimResult(
            scenario=self.sc, plan=self.plan, calibration_name=self.cal.name,
            calibration_source=str(self.cal.source), requests=self.requests, steps=self.steps,
            scheduler=self.scheduler, preemptor=self.preemptor, allocator=self.allocator,
            swap=self.swap, sim_wall_s=time.perf_counter() - t0, end_s=self.env.now,
            calibration_label=self.cal.source_label)

"""The SimPy simulation: arrivals, the engine loop on a simulated clock, and a PCIe link for swaps.

Every engine step is :class:`sim.engine.step.engine_step.EngineStep`'s, the same object the real engine
drives; here its batches take the cost model's predicted time (``PredictedRunner``) and the
clock advances by it, swaps holding the host link (a SimPy resource, so transfers
serialize). Where the engine profile has a front end (sim/engine/step/frontend.py), requests
pass through its CPU before the engine sees them and every token after the engine made it;
the client's times are stamped there. Follow-up turns of a conversation arrive a think
time after the client received the previous answer.

The run ends when no event is left: every arrival has happened and the engine has
drained its queues (or can make no progress, which leaves requests ``in_flight``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import simpy

from sim.config.scenario import Scenario
from sim.engine.step.frontend import FrontEnd
from sim.engine.macro.run import DecodeRun
from sim.engine.logs.itl import ItlLog
from sim.engine.logs.metrics import StepLog
from sim.engine.parts import SessionDriver, build_parts
from sim.engine.logs.request_log import Tally
from sim.engine.step.engine_step import EngineStep, PredictedRunner, WaitKind
from sim.errors import ConfigError
from sim.gc_pause import fewer_collections
from sim.kv.swap import SwapSpace
from sim.model.memory import MemoryPlan
from sim.request import Request
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
    kernel_timing: str = "engine"  # the calibration's (sim/calib/calibration.py): engine or device
    profile: object = None  # the engine profile as run (sim.cost.profile.EngineProfile)
    frontend: object = None  # the front end's CPUs (sim/engine/step/frontend.py), None without one
    itl: object = None  # the inter-token gaps (sim/engine/logs/itl.py ItlLog), None where not kept
    extra: dict = field(default_factory=dict)


class Simulation:
    """One run of one scenario. ``run()`` returns a :class:`SimResult`.

    ``step_hook(out)``, if given, is called with every batch before the clock advances
    (and with a batch that only swaps requests out)
    (``sim validate`` runs the same batch on the real model there, in lockstep).
    """

    _stages = None  # pipeline parallelism: sim/engine/pipeline/simulation.py's virtual engines set it (#15)
    #: Events within a step (arrivals, follow-up turns, the front end's intake) never read the
    #: engine's state, so a macro-step stretch may end with the step they fall within
    #: (sim/engine/macro/run.py). A cluster's replicas set it False: their router reads them.
    macro_straddles = True

    def __init__(self, sc: Scenario, progress=None,
                 step_hook: Callable[[SchedulerOutput], None] | None = None, macro_steps: bool = True,
                 keep_requests: bool = False, planned: tuple | None = None) -> None:
        if sc.engine.pipeline_parallel_size > 1:  # pipeline parallelism runs in sim/engine/pipeline/simulation.py (#15)
            raise ConfigError(sc.source_path, "engine.pipeline_parallel_size", (
                f"{sc.engine.pipeline_parallel_size} pipeline stages run with `sim run` and `sim sweep` only"
                " (sim/engine/pipeline/simulation.py); this command simulates one single-stage engine: set it to 1"))
        if sc.cluster.num_replicas > 1:
            raise ConfigError(sc.source_path, "cluster.num_replicas", (
                f"{sc.cluster.num_replicas} replicas run with `sim run` only (sim/engine/cluster/simulation.py); "
                "this command simulates one engine: set cluster.num_replicas: 1"))
        self._assemble(build_parts(sc, planned), simpy.Environment(), None, step_hook, macro_steps, keep_requests)
        self.progress = progress

    def _assemble(self, parts, env: simpy.Environment, driver: SessionDriver | None,
                  step_hook=None, macro_steps: bool = True, keep_requests: bool = False) -> None:
        """The engine of ``parts`` on ``env``'s clock (a cluster's replica shares the clock and
        the ``driver``). ``keep_requests``: keep every request as an object to the end (the
        scheduler's ``finished`` and ``rejected`` lists hold them) instead of retiring it."""
        self.sc = sc = parts.sc  # as run (a model may veto a profile default)
        self.parts = parts
        self.model, self.cal, self.plan, self.cost = parts.model, parts.cal, parts.plan, parts.cost
        self.budget, self.allocator, self.swap = parts.budget, parts.allocator, parts.swap
        self.preemptor, self.scheduler = parts.preemptor, parts.scheduler
        self.sessions: list[SessionSpec] = parts.sessions
        self.driver = driver if driver is not None else SessionDriver(sc, self.scheduler)
        self.requests = self.driver.requests
        # Finished and rejected requests are not kept as objects: the scheduler counts them,
        # rejected ones are retired into the request log at once, finished ones after the
        # step (once the front end has streamed their last token).
        self._done: list[Request] = []
        if not keep_requests:
            self.scheduler.finished = Tally(self._done.append)
            self.scheduler.rejected = Tally(self.driver.requests.retire)
        self.env = env
        self.link = simpy.Resource(self.env, capacity=1)
        self.disk = simpy.Resource(self.env, capacity=1)  # a disk tier's reads and writes, in order (sim/kv/offload.py)
        lower = getattr(getattr(self.allocator, "tier", None), "lower", None)
        if lower is not None:  # its writes (the CPU tier's demotions) queue on the drive: reads wait behind them
            lower.on_write = lambda seconds: self.env.process(self._disk_busy(seconds))
        self._wakeup = self.env.event()
        profile = parts.profile
        self.frontend = FrontEnd(profile, parts.sc.engine.api_servers) if profile.has_frontend else None
        self.core = EngineStep(self.scheduler, self.allocator, self.driver, StepLog(),
                               PredictedRunner(self.cost), clock=lambda: self.env.now, hook=step_hook)
        # Every token's gap since the request's previous one, stamped when it reaches the client.
        self.itl = ItlLog()
        if self.frontend is not None:
            self.frontend.itl = self.itl
        else:
            self.core.itl = self.itl
        self.macro_steps = macro_steps  # stretches of pure decodes in one go (sim/engine/macro/run.py)

    @property
    def steps(self) -> StepLog:
        return self.core.steps

    @steps.setter
    def steps(self, log: StepLog) -> None:
        self.core.steps = log

    @property
    def idle_before_s(self) -> float:
        """Idle time before the batch being run (the step hook may read it)."""
        return self.core.idle_before_s

    # -- requests ---------------------------------------------------------------------------

    def _submit(self, session: SessionSpec, turn: int) -> None:
        if self.frontend is not None:
            req = self.driver.make(session, turn, self.env.now)
            self.env.process(self._through_frontend(req))
            return
        if self.driver.submit(session, turn, self.env.now) and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _through_frontend(self, req: Request):
        """The request waits for the front end's CPU and its tokenising, then reaches the engine."""
        ready = self.frontend.receive(self.env.now, req.num_prompt_tokens)
        if ready > self.env.now:
            yield self.env.timeout(ready - self.env.now)
        if self.scheduler.add_request(req) and not self._wakeup.triggered:
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
        env, core, has_work, frontend = self.env, self.core, self.scheduler.has_work, self.frontend
        compute = WaitKind.COMPUTE
        macro = DecodeRun(self) if self.macro_steps else None  # built here: tests may swap the step log first
        while True:
            if not has_work():
                self._wakeup = env.event()
                yield self._wakeup
            if macro is not None and macro.enabled:
                advanced = yield from macro.run()
                if advanced:  # (it did what follows a step that finishes requests itself)
                    if self.progress is not None:
                        sched = self.scheduler
                        self.progress(env.now, len(sched.finished) + len(sched.rejected), len(self.requests))
                    continue
            step = core.begin()
            if step.out.tier_loads:
                self._start_loads(step.out.tier_loads)
            for wait in step.waits:
                if wait.kind is compute:
                    if self._stages is None:
                        yield env.timeout(wait.seconds)
                    else:  # pipeline parallelism: the batch holds each stage in turn (sim/engine/pipeline/simulation.py)
                        yield from self._stages(step)
                else:
                    yield from self._transfer(wait.seconds)
            after = core.end(step, env.now)
            if frontend is not None and step.ran:
                frontend.stream(env.now, self.scheduler.sampled, after.finished)
            if self._done:
                self._retire_done()
            if not step.ran:
                if after.retry:
                    continue  # a preemption freed memory (after its swap-out): try again at once
                self._wakeup = env.event()
                yield self._wakeup  # nothing can run until something arrives
                continue
            self._spawn_follow_ups(after.follow_ups)
            if self.progress is not None:
                sched = self.scheduler
                self.progress(env.now, len(sched.finished) + len(sched.rejected), len(self.requests))

    def _after_finishing(self, finished: list[Request]) -> None:
        """What the engine loop does after a step that finished ``finished`` (their last token
        already streamed): their follow-up turns, a think time after the client's answer, and
        their retirement into the request log."""
        follow_ups = self.core.follow_ups(finished)
        if self._done:
            self._retire_done()
        self._spawn_follow_ups(follow_ups)

    def _spawn_follow_ups(self, follow_ups: list) -> None:
        """Each next turn arrives its think time after the client got the answer: the front
        end streams it (``free_at``), else the engine's answer is the client's."""
        env, frontend = self.env, self.frontend
        delay = frontend.free_at - env.now if frontend is not None and frontend.free_at > env.now else 0.0
        for session, turn, think_s in follow_ups:
            env.process(self._follow_up(session, turn, think_s + delay))

    def _retire_done(self) -> None:
        retire = self.driver.requests.retire
        for req in self._done:
            retire(req)
        self._done.clear()

    def _transfer(self, seconds: float):
        with self.link.request() as slot:  # swaps hold the host link: they serialize
            yield slot
            yield self.env.timeout(seconds)

    def _start_loads(self, loads: list) -> None:
        """A CPU tier's loads (sim/sched/tier.py): each runs on the host link (after the swaps
        and loads queued there, asynchronously to the engine's steps); its request is
        schedulable once it is done."""
        count = self.allocator.count_load
        for req, num_blocks in loads:
            self.env.process(self._load(req, *count(req, num_blocks)))

    def _load(self, req: Request, disk_s: float, seconds: float):
        if disk_s:  # blocks on the disk tier: read into host memory first (after the drive's queue)
            asked = self.env.now
            with self.disk.request() as slot:
                yield slot
                self.allocator.tier.lower.read_wait_s += self.env.now - asked
                yield self.env.timeout(disk_s)
        yield from self._transfer(seconds)
        self.scheduler.finish_load(req)
        if not self._wakeup.triggered:
            self._wakeup.succeed()

    def _disk_busy(self, seconds: float):
        """A write to the disk tier: it holds the drive, after what is queued there."""
        with self.disk.request() as slot:
            yield slot
            yield self.env.timeout(seconds)

    def done_s(self) -> float:
        """When the run's last work ended: the engine's last step or, where a front end streams
        the tokens, its last job (it may still be streaming a backlog after the engine's last
        step: the last answers reach their clients then, and the run's span includes it)."""
        fe = self.frontend
        return self.env.now if fe is None or fe.free_at <= self.env.now else fe.free_at

    def run(self) -> SimResult:
        t0 = time.perf_counter()
        self.env.process(self._arrivals())
        self.env.process(self._engine())
        with fewer_collections():
            self.env.run()
        self._retire_done()
        return SimResult(
            scenario=self.sc, plan=self.plan, calibration_name=self.cal.name,
            calibration_source=str(self.cal.source), requests=self.requests, steps=self.steps,
            scheduler=self.scheduler, preemptor=self.preemptor, allocator=self.allocator,
            swap=self.swap, sim_wall_s=time.perf_counter() - t0, end_s=self.done_s(),
            calibration_label=self.cal.source_label, profile=self.parts.profile, frontend=self.frontend,
            kernel_timing=self.cal.kernel_timing, itl=self.itl)

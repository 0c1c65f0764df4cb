"""Pipeline parallelism as vLLM V1 runs it: one scheduler, one KV pool, a queue of up to pp
batches in flight through the stages (issue #15 item 2; ``engine.pipeline_mode: batch-queue``).

What vLLM does (vllm/v1/engine/core.py and vllm/v1/core/sched/scheduler.py):

- ``EngineCore`` sets ``batch_queue_size = vllm_config.max_concurrent_batches``, which is
  ``pipeline_parallel_size`` ("Batch queue for scheduled batches. This enables us to
  asynchronously schedule and execute batches, and is required by pipeline parallelism to
  eliminate pipeline bubbles"), and then steps with ``step_with_batch_queue``: while the
  queue is not full and the scheduler has requests it schedules a new batch and hands it to
  the executor without waiting ("fulfilling the batch queue has a higher priority than
  getting model outputs"); when the queue is full, or nothing more can be scheduled, it
  blocks on the *oldest* batch and applies its output (``update_from_output``): outputs
  come back in the order the batches were sent.
- There is one ``Scheduler`` and one ``KVCacheManager`` over all of ``num_gpu_blocks``
  (no division by pp, unlike V0's ``num_gpu_blocks //= pipeline_parallel_size``).
- A request in an in-flight batch is not scheduled again until its output is back. Early
  V1 releases kept a ``scheduled_req_ids`` set and skipped its members; the current
  scheduler advances ``num_computed_tokens`` when it schedules (``_update_after_schedule``),
  so a decode in flight has ``num_new_tokens == 0`` and is skipped: "No new tokens to
  schedule. This may happen when PP>1 and we have already scheduled all prompt tokens but
  they are not finished yet". Two refinements are not modelled here: the current scheduler
  may put the *next chunk* of a chunked prefill in the next batch before the previous
  chunk came back (its tokens are known), and with ``async_scheduling`` a decode is
  scheduled ahead with an output placeholder (``num_output_placeholders``). TensorRT-LLM's
  PyTorch executor does the same with an ``inflight_req_ids`` set its scheduler skips
  (pp micro-batches), and SGLang's ``event_loop_pp`` keeps pp micro-batches over one pool.

The engine here (:class:`BatchQueueSimulation`, a :class:`~sim.engine.simulation.Simulation`
with its own engine loop) schedules a new batch when stage 0 is free, fewer than pp batches
are in flight and the scheduler has work; scheduling when stage 0 frees rather than as soon
as a slot frees lets a batch take in the requests that arrived meanwhile, and changes no
timing (the batch would wait for stage 0 anyway). The batch goes through the stages of
sim/engine/pipeline/stages.py (the same ones vLLM V0's form holds; stage times from
sim/cost/pipeline.py); when it leaves the last stage it waits for any older batch still in
flight, then its output is applied (``EngineStep.end``: the scheduler's update, the step
log, finished requests, follow-up turns) and the next batch may go.

While the scheduler picks a batch, the requests in flight are out of its sight
(:func:`schedule_around`): not scheduled, and not preemption victims either (vLLM may
preempt one; its KV is being written by a batch in flight, so here it is left alone), while
they still count against ``max_num_seqs``. This uses the scheduler's public queues only
(``running``, kept in admission order, and ``max_num_seqs``); sim/sched is not changed.
Static batching keeps one batch in flight (its batch runs to the end as a whole). A
scheduler watermark (``scheduler.watermark``) is waived while every running request is in
flight, as when none runs (vLLM V1 has no watermark).

A consequence of the rule (vLLM's as much as this model's): under a saturated load the
running requests split into pp groups that stay together (a group's output comes back, the
group is scheduled as the next batch, and a request admitted into a freed slot joins it), so
an uneven split made while the load ramps up persists, and the last stage idles while the
larger group's next batch is in stage 0; vLLM V0's virtual engines, fed least-outstanding,
stay even. On a saturated 1,500-request decode-heavy run of Llama-3-8B at pp 2 and equal total
concurrency (256 here, 2 x 128 there) the last stage was busy 0.987 against V0's 0.993 with
the ``eager`` profile, and 0.946 against 0.990 with ``vllm-v1`` (whose ramp-up split 106/150).

Step log: a row per batch, written when its output is applied; its ``duration_s`` is the
time since the previous row when that is shorter than the batch's own time, so the rows
tile the time the engine had a batch in flight (``engine.busy_s``) and time-weighted means
stay means. Macro-steps are off. ``cluster.num_replicas`` > 1 runs replicas of this engine
behind the cluster's router (sim/engine/pipeline/cluster.py).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from operator import attrgetter

import simpy

from sim.config.scenario import Scenario
from sim.engine.logs.metrics import StepLog
from sim.engine.parts import build_parts
from sim.engine.pipeline.stages import StagedRunner, Stages
from sim.engine.simulation import SimResult, Simulation
from sim.engine.step.engine_step import EngineStep, Step, WaitKind
from sim.errors import ConfigError
from sim.sched.static import StaticScheduler


_ADMITTED = attrgetter("admit_seq")


def schedule_around(core: EngineStep, scheduler, busy: set[int]) -> Step:
    """``core.begin()`` with the requests whose ids are in ``busy`` (in flight) out of the
    scheduler's sight: neither scheduled nor preempted, still counted against ``max_num_seqs``.
    ``running`` is restored in admission order (``admit_seq``) afterwards."""
    if not busy:
        return core.begin()
    running = scheduler.running
    hidden = [r for r in running if r.request_id in busy]
    scheduler.running = [r for r in running if r.request_id not in busy]
    limit = scheduler.max_num_seqs
    scheduler.max_num_seqs = limit - len(hidden)
    try:
        return core.begin()
    finally:
        scheduler.max_num_seqs = limit
        scheduler.running = sorted(scheduler.running + hidden, key=_ADMITTED)  # two sorted runs: a merge


class BatchLog(StepLog):
    """The step log of overlapping batches (module docstring): a row's duration is at most
    the time since the previous row."""

    def __init__(self) -> None:
        super().__init__()
        self._last_s = -math.inf

    def record(self, now, duration, out, sched, allocator) -> None:
        gap = now - self._last_s
        self._last_s = now
        super().record(now, duration if duration < gap else gap, out, sched, allocator)


@dataclass(eq=False)
class Batch:
    """A batch in flight: its step, its stage times, its requests and when its output was applied."""

    step: Step
    times: tuple[float, ...]  # seconds in each stage (empty: it computes nothing)
    transfer_s: float  # activations from one stage to the next
    ids: frozenset[int]  # its requests
    applied: simpy.Event  # succeeds once its output was applied
    previous: simpy.Event | None  # the older batch's ``applied`` (outputs go back in order)


class BatchQueueSimulation(Simulation):
    """One pipeline-parallel engine in vLLM V1's form (module docstring). ``run()`` returns a
    SimResult whose ``extra["pipeline"]`` holds the stages' figures (sim/engine/pipeline/summary.py)."""

    def __init__(self, sc: Scenario, progress=None, step_hook=None, planned: tuple | None = None) -> None:  # noqa: PLW0231 -- its own checks
        pp = sc.engine.pipeline_parallel_size
        if sc.cluster.num_replicas > 1:  # replicas of it: sim/engine/pipeline/cluster.py
            raise ConfigError(sc.source_path, "cluster.num_replicas", (
                f"{sc.cluster.num_replicas} replicas of a pipeline-parallel engine run as a cluster "
                "(sim/engine/pipeline/cluster.py, through PipelineSimulation: `sim run`, `sim sweep`); "
                "this class simulates one engine: set cluster.num_replicas: 1"))
        self._assemble(build_parts(sc, planned), simpy.Environment(), None, step_hook, macro_steps=False)
        self.progress = progress
        self._init_queue(pp)

    def _init_queue(self, pp: int) -> None:
        """The batch queue's state on an assembled engine (a cluster's replica calls it too,
        sim/engine/pipeline/cluster.py): its own stages, runner and step log."""
        self.pp = pp
        self.stages = Stages(self.env, pp)
        self.runner = StagedRunner(self.cost)
        self.core.runner = self.runner
        self.steps = BatchLog()
        self.in_flight: deque[Batch] = deque()  # oldest first
        self._busy: set[int] = set()  # ids of the requests in flight
        self._entering: object = None  # the batch (or swap-out) launched and not yet out of stage 0
        self._static = isinstance(self.scheduler, StaticScheduler)
        self.peak_in_flight = 0

    # -- the engine loop ------------------------------------------------------------------

    def _engine(self):
        while True:
            self._pump()
            self._wakeup = self.env.event()
            yield self._wakeup  # an arrival (batches call _pump themselves)

    def _pump(self) -> None:
        """Schedule and launch a batch if stage 0 is free, fewer than pp batches are in flight
        and the scheduler has work."""
        core, flight, now = self.core, self.in_flight, self.env.now
        while (self._entering is None and len(flight) < self.pp and self.scheduler.has_work()
               and not (self._static and flight)):
            if flight:
                core.last_end_s = now  # the stages are busy: the new batch does not start after idle
            step = schedule_around(core, self.scheduler, self._busy)
            if step.ran:
                self._launch(step)
                return
            if step.waits:  # nothing runs, victims are copied out first (then schedule again)
                self._entering = step
                self.env.process(self._copy_out(step))
                return
            if not core.end(step, now).retry:
                return  # nothing to schedule until a batch comes back or a request arrives

    def _launch(self, step: Step) -> None:
        computes = any(w.kind is WaitKind.COMPUTE for w in step.waits)
        times, transfer = self.runner.last if computes else ((), 0.0)
        flight = self.in_flight
        batch = Batch(step, times, transfer, frozenset(r.request_id for r, _ in step.out.scheduled),
                      self.env.event(), flight[-1].applied if flight else None)
        flight.append(batch)
        self._busy |= batch.ids
        self._entering = batch
        self.peak_in_flight = max(self.peak_in_flight, len(flight))
        self.env.process(self._run(batch))

    def _left_stage_0(self, batch) -> None:
        if self._entering is batch:
            self._entering = None
            self._pump()

    def _run(self, batch: Batch):
        def left(stage: int) -> None:
            if stage == 0:
                self._left_stage_0(batch)

        for wait in batch.step.waits:  # swaps first, then the forward pass through the stages
            if wait.kind is WaitKind.COMPUTE:
                yield from self.stages.hold(batch.times, batch.transfer_s, left)
            else:
                yield from self._transfer(wait.seconds)
        self._left_stage_0(batch)  # (a batch of padding rows only holds no stage)
        if batch.previous is not None and not batch.previous.triggered:
            yield batch.previous  # vLLM applies outputs in the order it sent the batches
        self._apply(batch)

    def _apply(self, batch: Batch) -> None:
        env = self.env
        self.in_flight.popleft()
        self._busy -= batch.ids
        after = self.core.end(batch.step, env.now)
        if self.frontend is not None:
            self.frontend.stream(env.now, self.scheduler.sampled, after.finished)
        if self._done:
            self._retire_done()
        self._spawn_follow_ups(after.follow_ups)
        if self.progress is not None:
            sched = self.scheduler
            self.progress(env.now, len(sched.finished) + len(sched.rejected), len(self.requests))
        batch.applied.succeed()
        self._pump()

    def _copy_out(self, step: Step):
        for wait in step.waits:
            yield from self._transfer(wait.seconds)
        self.core.end(step, self.env.now)
        self._entering = None
        self._pump()

    def pipeline_info(self) -> dict:
        """The stages' figures (``extra["pipeline"]`` of a result, sim/engine/pipeline/summary.py)."""
        return {
            "stage_busy_s": list(self.stages.busy_s), "batches": self.stages.batches, "plan": self.plan,
            "stage_layers": list(getattr(self.cost, "stage_layers", (self.model.num_layers,))),
            "peak_batches_in_flight": self.peak_in_flight}

    def run(self) -> SimResult:
        result = super().run()
        result.extra["pipeline"] = self.pipeline_info()
        return result


__all__ = ["BatchLog", "BatchQueueSimulation", "schedule_around"]

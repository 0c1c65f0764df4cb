"""The stages of a pipeline-parallel replica and the runner whose batches go through them
(issue #15 item 2), shared by both pipeline forms (sim/engine/pipeline/simulation.py: vLLM V0's virtual
engines; sim/engine/pipeline/batch_queue.py: vLLM V1's batch queue).

Each stage is a SimPy resource of capacity 1: a batch holds stage 0 for its stage-0 time
(sim/cost/pipeline.py), sends its activations over the p2p link (a delay that holds no
stage), holds stage 1, and so on; the last stage's end is the step's end. Several batches
are in flight at once, so while one batch is in stage 1 the next can run in stage 0:
pipeline bubbles and overlap come out of the simulation, not out of a formula.
"""

from __future__ import annotations

from typing import Callable

import simpy

from sim.cost.pipeline import PipelineCost
from sim.engine.step.predict import predicted_step_s
from sim.engine.step.engine_step import PredictedRunner
from sim.sched.output import SchedulerOutput


class Stages:
    """The pipeline's stages: one SimPy resource each, and how long each was busy."""

    def __init__(self, env: simpy.Environment, num_stages: int) -> None:
        self.env = env
        self.slots = [simpy.Resource(env, capacity=1) for _ in range(num_stages)]
        self.busy_s = [0.0] * num_stages
        self.batches = 0

    def hold(self, times: tuple[float, ...], transfer_s: float,
             on_leave: Callable[[int], None] | None = None):
        """A batch through every stage in turn: wait for the stage, compute, send the activations on.
        ``on_leave(i)``, if given, is called as the batch leaves stage i (the batch queue
        schedules its next batch when stage 0 is free)."""
        env = self.env
        self.batches += 1
        for i, seconds in enumerate(times):
            if i:
                yield env.timeout(transfer_s)  # activations over the p2p link to stage i
            with self.slots[i].request() as slot:
                yield slot
                yield env.timeout(seconds)
            self.busy_s[i] += seconds
            if on_leave is not None:
                on_leave(i)


class StagedRunner(PredictedRunner):
    """A BatchRunner (sim/engine/step/engine_step.py) on a PipelineCost: the compute wait is one batch's
    time through every stage, and the stage times are kept for the stages to hold. On a
    plain cost model (one stage: ``pipeline_parallel_size`` 1) it is the PredictedRunner's
    time as a single stage."""

    def __init__(self, cost) -> None:
        super().__init__(cost)
        self.last: tuple[tuple[float, ...], float] = ((), 0.0)  # (stage seconds, transfer seconds)

    def compute_s(self, out: SchedulerOutput, idle_before_s: float) -> float:
        cost = self.cost
        if not isinstance(cost, PipelineCost):
            seconds = predicted_step_s(cost, out, idle_before_s)
            self.last = ((seconds,), 0.0)
            return seconds
        shape = out.batch_shape()
        times, transfer = cost.stage_times_s(shape, idle_before_s), cost.transfer_s(shape)
        self.last = (times, transfer)
        return sum(times) + (len(times) - 1) * transfer


__all__ = ["StagedRunner", "Stages"]

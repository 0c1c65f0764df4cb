"""Running the real engine: in lockstep with the simulator, or open loop on the wall clock.

* **Lockstep**: the simulator runs as usual (its clock advances by the cost model), and
  every batch it schedules is also executed on the real model and timed. Decisions are
  the simulator's by construction; what is compared is each step's predicted against
  measured time. Where the simulated engine sat idle before a step and the calibration
  measured an after-idle factor, the real engine sleeps as long first (up to the idle
  time the calibration measured), so the step is as cold as the one predicted.
* **Open loop**: the real engine (``realengine.serve``) serves the workload with arrivals on
  the wall clock, built from fresh parts (the same scheduler, allocator, workload and engine
  step as the simulator), with measured step times deciding when the next step starts.

Both build the model with the memory plan's number of KV blocks, so the pool is the one
the allocator manages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from realengine.executor import StepExecutor
from realengine.model import TinyLlama, make_model
from realengine.serve import ExecutorRunner, RealRun, serve
from realengine.tier_copy import TierCopies
from sim.calib.composition import IDLE_THRESHOLD_S
from sim.config.scenario import Scenario
from sim.engine.parts import build_parts
from sim.engine.step.predict import after_idle_replay_s, kernel_sum_cost, predicted_step_s, predicted_transfer_s
from sim.engine.simulation import SimResult, Simulation
from sim.sched.output import SchedulerOutput
from validation.compare import StepTiming, shape

@dataclass(kw_only=True)
class StepSample(StepTiming):
    batch: tuple  # ((request_id, num_new_tokens), ...): the decision, for comparisons
    idle_before_s: float | None = None  # open loop: wall time since the previous step ended


def _sample(cost, raw, out: SchedulerOutput, measured: float, idle_before_s: float = 0.0) -> StepSample:
    """A step's prediction (its swaps' transfer, then compute, as the simulator's clock
    advances; after-idle factor included) against its measured time (swaps, packing and
    forward). ``kernel_sum_s`` is the plain kernel sum (``raw``: kernel_sum_cost(cost))."""
    transfer = predicted_transfer_s(cost, out)
    return StepSample(predicted_s=predicted_step_s(cost, out, idle_before_s) + transfer, measured_s=measured,
                      batch=tuple((r.request_id, n) for r, n in out.scheduled),
                      kernel_sum_s=None if raw is None else predicted_step_s(raw, out) + transfer,
                      idle_before_s=idle_before_s, **shape(out))


def run_lockstep(sc: Scenario, device: torch.device, model: TinyLlama | None = None,
                 tier_samples: list | None = None):
    """(SimResult, [StepSample]) of the simulator with every batch also run for real. With
    ``kv.offload``, the CPU tier's blocks move for real too (realengine/tier_copy.py), each
    transfer timed apart: its TransferSamples go onto ``tier_samples``."""
    samples: list[StepSample] = []
    holder: dict = {}

    def hook(out: SchedulerOutput) -> None:
        idle = sim.idle_before_s
        if out.scheduled and idle >= IDLE_THRESHOLD_S and replay_idle_s > 0:
            time.sleep(min(idle, replay_idle_s))  # the lull the simulator's engine sat through
        measured = holder["executor"].execute(out)
        if out.scheduled:  # a swap-out-only batch is executed, not compared
            samples.append(_sample(sim.cost, raw, out, measured, idle))

    sim = Simulation(sc, step_hook=hook)
    replay_idle_s = after_idle_replay_s(sim.cost)  # as long as the calibration measured
    raw = kernel_sum_cost(sim.cost)
    model = model or make_model(sc, device)
    copies = TierCopies(model, sim.allocator) if getattr(sim.allocator, "tier", None) is not None else None
    holder["executor"] = StepExecutor(model, sim.allocator, sc.kv.block_size, sc.kv.swap_transfer, copies)
    result = sim.run()
    if copies is not None and tier_samples is not None:
        tier_samples.extend(copies.samples)
        tier_samples.append(copies.reference_bytes_per_s())  # last: the machine's contiguous copy rate now
    return result, samples


def warm_up(sc: Scenario, model: TinyLlama, num_requests: int = 12) -> None:
    """A short untimed lockstep run: first-call costs (allocations, kernel compilation)
    stay out of the measurements."""
    data = sc.model_dump()
    data["workload"] = {**data["workload"], "num_requests": num_requests, "duration_s": None}
    small = Scenario.model_validate({**data, "source_path": sc.source_path})
    run_lockstep(small, model.device, model)


def run_open_loop(sc: Scenario, model: TinyLlama) -> RealRun:
    """Serve the scenario's workload for real, arrivals on the wall clock."""
    parts = build_parts(sc)
    runner = ExecutorRunner(StepExecutor(model, parts.allocator, sc.kv.block_size, sc.kv.swap_transfer))
    run = serve(parts, runner)
    # predictions after the run: the cost model's work is not the engine's (on the CPU it
    # would add ~100 us between steps, 2-3% of a step here)
    raw = kernel_sum_cost(parts.cost)
    run.samples = [_sample(parts.cost, raw, out, measured, idle) for out, measured, idle in runner.timed]
    return run


def simulate(sc: Scenario) -> SimResult:
    return Simulation(sc).run()

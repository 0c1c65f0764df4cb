"""Running the real engine: in lockstep with the simulator, or open loop on the wall clock.

* **Lockstep**: the simulator runs as usual (its clock advances by the cost model), and
  every batch it schedules is also executed on the real model and timed. Decisions are
  the simulator's by construction; what is compared is each step's predicted against
  measured time. Where the simulated engine sat idle before a step and the calibration
  measured an after-idle factor, the real engine sleeps as long first (up to the idle
  time the calibration measured), so the step is as cold as the one predicted.
* **Open loop**: a real engine serves the workload with arrivals on the wall clock, built
  from fresh parts (the same scheduler, allocator and workload objects as the simulator),
  with measured step times deciding when the next step starts.

Both build the model with the memory plan's number of KV blocks, so the pool is the one
the allocator manages.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import torch

from sim.engine.predict import after_idle_replay_s, kernel_sum_cost, predicted_step_s, predicted_transfer_s
from sim.engine.simulation import Simulation, SimResult
from sim.calib.composition import IDLE_THRESHOLD_S
from sim.engine.metrics import StepLog
from sim.engine.parts import SessionDriver, build_parts
from sim.config.scenario import Scenario
from sim.sched.output import SchedulerOutput
from realengine.executor import StepExecutor
from realengine.model import TinyLlama

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class StepSample:
    predicted_s: float
    measured_s: float
    num_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    decode_kv_tokens: int
    batch: tuple  # ((request_id, num_new_tokens), ...): the decision, for comparisons
    kernel_sum_s: float | None = None  # the prediction without the calibration's composition
    idle_before_s: float | None = None  # open loop: wall time since the previous step ended


@dataclass
class RealRun:
    requests: list
    steps: StepLog
    end_s: float
    samples: list[StepSample] = field(default_factory=list)
    allocator: object = None
    preemptor: object = None
    swap: object = None
    scheduler: object = None


def make_model(sc: Scenario, device: torch.device) -> TinyLlama:
    """The scenario's model with random weights and a KV cache of the plan's blocks."""
    if sc.engine.weight_dtype not in TORCH_DTYPES:
        raise ValueError(f"the real engine runs fp16 or bf16 weights, not {sc.engine.weight_dtype}")
    parts = build_parts(sc)
    return TinyLlama(parts.model, num_blocks=parts.plan.num_gpu_blocks, block_size=sc.kv.block_size,
                     device=device, dtype=TORCH_DTYPES[sc.engine.weight_dtype], seed=sc.seed)


def _sample(cost, raw, out: SchedulerOutput, measured: float, idle_before_s: float = 0.0) -> StepSample:
    """A step's prediction (its swaps' transfer, then compute, as the simulator's clock
    advances; after-idle factor included) against its measured time (swaps, packing and
    forward). ``kernel_sum_s`` is the plain kernel sum (``raw``: kernel_sum_cost(cost))."""
    transfer = predicted_transfer_s(cost, out)
    return StepSample(predicted_step_s(cost, out, idle_before_s) + transfer, measured, out.num_seqs,
                      out.num_prefill_tokens, out.num_decode_tokens, out.decode_kv_tokens,
                      tuple((r.request_id, n) for r, n in out.scheduled),
                      None if raw is None else predicted_step_s(raw, out) + transfer, idle_before_s)


def run_lockstep(sc: Scenario, device: torch.device, model: TinyLlama | None = None):
    """(SimResult, [StepSample]) of the simulator with every batch also run for real."""
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
    holder["executor"] = StepExecutor(model, sim.allocator, sc.kv.block_size, sc.kv.swap_transfer)
    return sim.run(), samples


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
    sched, cost = parts.scheduler, parts.cost
    executor = StepExecutor(model, parts.allocator, sc.kv.block_size, sc.kv.swap_transfer)
    driver = SessionDriver(sc, sched)
    steps = StepLog()
    run = RealRun(driver.requests, steps, 0.0, allocator=parts.allocator,
                  preemptor=parts.preemptor, swap=parts.swap, scheduler=sched)
    pending = [(s.arrival_s, s.session_id, 0, s) for s in parts.sessions]
    heapq.heapify(pending)
    t0 = time.perf_counter()
    last_end = None
    timed: list[tuple[SchedulerOutput, float, float | None]] = []  # (batch, measured s, idle before)

    def now() -> float:
        return time.perf_counter() - t0

    while pending or sched.has_work():
        while pending and pending[0][0] <= now():
            arrival, _, turn, session = heapq.heappop(pending)
            driver.submit(session, turn, arrival)  # it arrived then, even if seen late
        if not sched.has_work():
            time.sleep(max(0.0, pending[0][0] - now()))
            continue
        out = sched.schedule()
        if not out.scheduled and not out.decode_padding_seqs:
            executor.execute(out)  # swap-outs, if any
            if not out.preempted:
                if not pending:
                    break  # nothing can ever run: left in flight
                time.sleep(max(0.0, pending[0][0] - now()))
            continue
        start = now()
        measured = executor.execute(out)
        end = start + measured
        timed.append((out, measured, None if last_end is None else start - last_end))
        last_end = end
        finished = sched.update_from_output(out, end, start)
        steps.record(end, end - start, out, sched, parts.allocator)
        for req in finished:
            follow = driver.next_turn(req)
            if follow is not None:
                session, turn, think = follow
                heapq.heappush(pending, (end + think, session.session_id, turn, session))
    run.end_s = now()
    # predictions after the run: the cost model's work is not the engine's (on the CPU it
    # would add ~100 us between steps, 2-3% of a step here)
    raw = kernel_sum_cost(cost)
    run.samples = [_sample(cost, raw, out, measured, math.inf if idle is None else idle)
                   for out, measured, idle in timed]
    return run


def simulate(sc: Scenario) -> SimResult:
    return Simulation(sc).run()

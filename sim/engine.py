"""The SimPy engine: arrivals, the engine step loop, and a PCIe link for swaps.

The scheduler and allocator are plain objects; this module owns time. One engine step:
ask the scheduler for a batch, move swapped KV over the PCIe link (a SimPy resource, so
transfers serialize), advance the clock by the cost model's step time, then tell the
scheduler the step is done. Follow-up turns of a conversation arrive a think time after
the previous answer.

The run ends when no event is left: every arrival has happened and the engine has
drained its queues (or can make no progress, which leaves requests ``in_flight``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.calibration import load_calibration
from sim.cost import build_cost_model, step_time_s, swap_time_s
from sim.errors import ConfigError
from sim.kv import make_allocator
from sim.kv.token_budget import TokenBudget, TokenEviction
from sim.kv.swap import SwapSpace
from sim.memory import MemoryPlan, check_fits_one_sequence, plan_memory
from sim.metrics import StepLog
from sim.model import KVDtype, load_model
from sim.request import Request
from sim.scenario import Scenario, WhenKVFull
from sim.sched import make_scheduler
from sim.sched.preemption import Preemptor
from sim.sched.victim import RemainingOutputModel, VictimPolicy
from sim.workload import SessionSpec, build_workload, read_column, sample_lengths

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}


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
    extra: dict = field(default_factory=dict)


def build_plan(sc: Scenario):
    """Model, calibration and memory plan of a scenario (ConfigError on bad input)."""
    src = sc.source_path
    model = load_model(sc.model, source=src)
    cal = load_calibration(sc.gpu, source=src, key="gpu")
    eng = sc.engine
    plan = plan_memory(
        model, cal.memory_bytes, gpu_memory_utilization=eng.gpu_memory_utilization,
        block_size=sc.kv.block_size, kv_dtype=KVDtype(eng.kv_dtype),
        weight_dtype_bytes=DTYPE_BYTES[eng.weight_dtype],
        max_num_batched_tokens=sc.max_num_batched_tokens, max_num_seqs=sc.scheduler.max_num_seqs,
        max_model_len=eng.max_model_len, activation_peak_bytes=eng.activation_peak_bytes,
        runtime_overhead_bytes=eng.runtime_overhead_bytes, quant_group_size=eng.kv_quant_group_size,
        num_gpu_blocks_override=eng.num_gpu_blocks_override, source=src,
    )
    budget = token_budget(sc, model)
    plan = dataclasses.replace(plan, max_kv_tokens_per_seq=budget.kept_tokens(eng.max_model_len))
    check_fits_one_sequence(plan, eng.max_model_len, source=src)
    return model, cal, plan


def token_budget(sc: Scenario, model) -> TokenBudget:
    """The scenario's token-level KV budget; a model's native sliding window applies
    automatically when the scenario sets none."""
    budget = sc.kv.token_eviction.budget()
    window = model.sliding_window
    if budget.policy == TokenEviction.NONE and window and window < sc.engine.max_model_len:
        if sc.kv.prefix_caching:
            raise ConfigError(sc.source_path, "kv.prefix_caching", (
                f"{model.name} uses sliding-window attention ({window} tokens), whose evicted "
                "tokens break shared prefixes; prefix caching with it is not modelled: set "
                f"kv.prefix_caching: false or engine.max_model_len <= {window}"))
        budget = TokenBudget(TokenEviction.SLIDING_WINDOW, window_tokens=window)
    return budget


def remaining_output_model(sc: Scenario) -> RemainingOutputModel:
    """The output-length distribution the ``longest-remaining`` victim policy may know:
    a fresh sample of the workload's distribution (the trace's column for a replay)."""
    wl = sc.workload
    if wl.trace is not None:
        return RemainingOutputModel(read_column(str(sc.resolve(wl.trace.path)), "num_decode_tokens"))
    rng = np.random.default_rng([sc.seed, 1])  # independent of the workload's own draws
    return RemainingOutputModel(sample_lengths(wl.output_tokens, 20_000, rng, sc))


class Simulation:
    """One run of one scenario. ``run()`` returns a :class:`SimResult`."""

    def __init__(self, sc: Scenario, progress=None) -> None:
        self.sc = sc
        self.model, self.cal, self.plan = build_plan(sc)
        self.cost = build_cost_model(self.model, self.cal, KVDtype(sc.engine.kv_dtype),
                                     weight_dtype_bytes=DTYPE_BYTES[sc.engine.weight_dtype],
                                     quant_group_size=sc.engine.kv_quant_group_size)
        plan = self.plan
        self.budget = token_budget(sc, self.model)
        self.allocator = make_allocator(
            sc.kv.allocator, num_blocks=plan.num_gpu_blocks, block_size=sc.kv.block_size,
            max_kv_tokens=plan.max_kv_tokens_per_seq, prefix_caching=sc.kv.prefix_caching,
            eviction=sc.kv.prefix_cache_eviction, budget=self.budget)
        self.swap = SwapSpace(int(sc.kv.swap_space_gb * 2**30))
        self.preemptor = Preemptor(sc.scheduler.preemption, self.allocator, self.swap,
                                   bytes_per_slot=plan.bytes_per_block / plan.block_size)
        self.scheduler = make_scheduler(
            sc.scheduler.policy, self.allocator, self.preemptor,
            max_num_seqs=sc.scheduler.max_num_seqs,
            max_num_batched_tokens=sc.max_num_batched_tokens,
            max_model_len=sc.engine.max_model_len,
            reject_when_full=sc.scheduler.when_kv_full == WhenKVFull.REJECT,
            victim_policy=sc.scheduler.preemption_victim,
            remaining=(remaining_output_model(sc)
                       if sc.scheduler.preemption_victim == VictimPolicy.LONGEST_REMAINING else None),
            watermark_slots=int(sc.scheduler.watermark * plan.num_gpu_blocks * plan.block_size))
        self.sessions: list[SessionSpec] = build_workload(sc, np.random.default_rng(sc.seed))
        self.requests: list[Request] = []
        self.steps = StepLog()
        self.progress = progress
        self._history: dict[int, tuple] = {}  # session_id -> segments of the last turn + answer
        self.env = simpy.Environment()
        self.link = simpy.Resource(self.env, capacity=1)
        self._wakeup = self.env.event()

    # -- requests ---------------------------------------------------------------------------

    def _submit(self, session: SessionSpec, turn: int) -> None:
        spec = session.turns[turn]
        history = self._history.get(session.session_id)
        if history is None:
            history = (session.prefix,) if session.prefix is not None else ()
        segments = history + ((session.first_segment + turn, spec.user_tokens),)
        num_prompt = sum(n for _, n in segments)
        room = self.sc.engine.max_model_len - num_prompt
        max_tokens = min(self.sc.workload.max_tokens or room, room) if room > 0 else 1
        req = Request(len(self.requests), self.env.now, segments, max_tokens,
                      max(1, min(spec.output_tokens, max_tokens)), session=session, turn=turn)
        req.prefix_len = session.prefix[1] if session.prefix is not None else 0
        self.requests.append(req)
        if self.scheduler.add_request(req) and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _on_finished(self, req: Request) -> None:
        session = req.session
        nxt = req.turn + 1
        if nxt < len(session.turns):
            self._history[session.session_id] = req.segments()
            self.env.process(self._follow_up(session, nxt))
        else:
            self._history.pop(session.session_id, None)

    def _follow_up(self, session: SessionSpec, turn: int):
        yield self.env.timeout(session.turns[turn].think_time_s)
        self._submit(session, turn)

    def _arrivals(self):
        env = self.env
        for session in self.sessions:
            if session.arrival_s > env.now:
                yield env.timeout(session.arrival_s - env.now)
            self._submit(session, 0)

    # -- the engine loop ----------------------------------------------------------------------

    def _engine(self):
        env, sched, cost = self.env, self.scheduler, self.cost
        while True:
            if not sched.has_work():
                self._wakeup = env.event()
                yield self._wakeup
            out = sched.schedule()
            # A static batch whose last live member was just preempted is left with padding
            # rows only: that step still runs, so the batch ends and its answers go out.
            if not out.scheduled and not out.decode_padding_seqs:
                # Nothing ran. A preemption freed memory (after its swap-out, if any): try
                # again at once. Otherwise nothing can run until something arrives.
                if out.swap_out_bytes:
                    yield from self._transfer(out.swap_out_bytes)
                if out.preempted:
                    continue
                self._wakeup = env.event()
                yield self._wakeup
                continue
            start = env.now
            swap_bytes = out.swap_out_bytes + out.swap_in_bytes
            if swap_bytes:
                yield from self._transfer(swap_bytes)
            dt = step_time_s(
                cost, num_seqs=out.num_seqs,
                num_prefill_tokens=out.num_prefill_tokens + out.prefill_padding_tokens,
                num_decode_tokens=out.num_decode_tokens + out.decode_padding_seqs,
                decode_kv_tokens=out.decode_kv_tokens, prefill_attn_pairs=out.prefill_attn_pairs,
                prefill_kv_tokens=out.prefill_kv_tokens)
            yield env.timeout(dt)
            finished = sched.update_from_output(out, env.now, start)
            self.steps.record(env.now, env.now - start, out, sched, self.allocator)
            for req in finished:
                self._on_finished(req)
            if self.progress is not None:
                self.progress(env.now, len(sched.finished) + len(sched.rejected), len(self.requests))

    def _transfer(self, num_bytes: int):
        with self.link.request() as slot:
            yield slot
            yield self.env.timeout(swap_time_s(self.cost, num_bytes))

    def run(self) -> SimResult:
        t0 = time.perf_counter()
        self.env.process(self._arrivals())
        self.env.process(self._engine())
        self.env.run()
        return SimResult(
            scenario=self.sc, plan=self.plan, calibration_name=self.cal.name,
            calibration_source=str(self.cal.source), requests=self.requests, steps=self.steps,
            scheduler=self.scheduler, preemptor=self.preemptor, allocator=self.allocator,
            swap=self.swap, sim_wall_s=time.perf_counter() - t0, end_s=self.env.now)

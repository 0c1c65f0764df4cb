"""kvsim's side of the conformance check: its engine step (sim/engine/step/engine_step.py,
the one ``sim run`` drives) over a workload, on a clock that counts steps.

The scenario is the ``vllm-v1`` engine profile's, with the workload's settings; requests are
added before the scheduler call of their ``arrival_step``. Each step's decisions come back
as sim/engine/logs/schedule_log.py's records (``sim run --schedule``'s schedule.jsonl).
"""

from __future__ import annotations

from collections import deque

from sim.config.scenario import parse_scenario
from sim.engine.logs.schedule_log import ScheduleLog
from sim.engine.logs.step_log import StepLog
from sim.engine.parts import build_parts
from sim.engine.step.engine_step import EngineStep
from sim.request import Request

from tests.conformance.workloads import Workload


def scenario_for(w: Workload, profile: str = "vllm-v1"):
    s = w.settings
    return parse_scenario({
        "name": "conformance", "seed": 0, "model": "llama-3-8b", "gpu": "a100-80gb",
        "engine": {"profile": profile, "max_model_len": s.max_model_len,
                   "num_gpu_blocks_override": s.num_blocks,
                   "profile_overrides": {"async_scheduling": s.async_scheduling}},
        "kv": {"allocator": "paged", "block_size": s.block_size, "prefix_caching": s.prefix_caching},
        "scheduler": {"max_num_seqs": s.max_num_seqs, "max_num_batched_tokens": s.max_num_batched_tokens,
                      "policy": "chunked-prefill", "preemption": "recompute",
                      "long_prefill_token_threshold": s.long_prefill_token_threshold,
                      "watermark": s.watermark},
        "workload": {"num_requests": 1, "arrival": {"type": "poisson", "rate": 1.0},
                     "prompt_tokens": {"type": "fixed", "value": 16},
                     "output_tokens": {"type": "fixed", "value": 1}},
    }, "<conformance>")


class _NoTurns:
    """No request has a follow-up turn."""

    def next_turn(self, req):
        return None


class _Instant:
    """A runner whose batches take no time (only the order of decisions is compared)."""

    def swap_out(self, out) -> float:
        return 0.0

    def run(self, out, idle_before_s: float) -> tuple:
        return ()


def run_kvsim(w: Workload, max_steps: int = 20_000, profile: str = "vllm-v1") -> list[dict]:
    parts = build_parts(scenario_for(w, profile))
    sched, alloc = parts.scheduler, parts.allocator
    clock = [0.0]
    core = EngineStep(sched, alloc, _NoTurns(), StepLog(), _Instant(), clock=lambda: clock[0])
    log = core.schedule_log = ScheduleLog()
    pending = deque(sorted(w.requests, key=lambda r: (r.arrival_step, r.request_id)))
    k = 0
    while k < max_steps:
        while pending and pending[0].arrival_step <= k:
            c = pending.popleft()
            req = Request(c.request_id, float(k), c.segments, c.max_tokens, c.max_tokens)
            req.own_from, req.followed = None, True  # every token may be shared
            sched.add_request(req)
        if not sched.has_work():
            if not pending:
                break
            k = pending[0].arrival_step  # idle until the next arrival: no scheduler call
            continue
        clock[0] = float(k)
        step = core.begin()
        core.end(step, float(k))
        k += 1
    for rec in log.records:  # the clock is the step index here
        rec.pop("t_s", None)
    return log.records

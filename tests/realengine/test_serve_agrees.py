"""The simulator and the real engine share one engine step: fed the same workload and the same
step times, they make the same decisions and keep the same idle-time bookkeeping.

The real engine's serving loop (``realengine.serve``) runs here on a fake clock with a fake
executor that takes the cost model's predicted times, so no model runs and nothing sleeps;
what differs from the SimPy simulation is only the driver around ``EngineStep``.
"""

from __future__ import annotations

import math

import pytest

from realengine.serve import serve
from sim.config.scenario import load_scenario, parse_scenario
from sim.engine.parts import build_parts
from sim.engine.simulation import Simulation
from sim.engine.step.engine_step import PredictedRunner

SCENARIOS = "scenarios"
CASES = {
    # a 24-block pool and a victim policy that may pick the first running request itself:
    # batches that only swap requests out
    "swap-only batches": ({
        "name": "swap-only", "seed": 1, "model": "tiny-llama", "gpu": "a100-80gb",
        "engine": {"profile": "eager", "max_model_len": 256, "num_gpu_blocks_override": 24},
        "kv": {"allocator": "paged", "block_size": 16},
        "scheduler": {"policy": "continuous", "preemption": "swap", "preemption_victim": "longest-remaining"},
        "workload": {"num_requests": 40, "arrival": {"type": "poisson", "rate": 200.0},
                     "prompt_tokens": {"type": "uniform", "low": 5, "high": 200},
                     "output_tokens": {"type": "uniform", "low": 2, "high": 200}}}, []),
    "swap preemption": ("validate-cpu-swap.yaml", []),
    "recompute preemption": ("validate-cpu-swap.yaml", ["scheduler.preemption=recompute"]),
    "static batching": ("validate-cpu.yaml", ["scheduler.policy=static", "workload.num_requests=30"]),
    "multi-turn, prefix cache, chunked prefill": (
        "shared-prompt-cache.yaml", ["workload.num_requests=150"]),
    "contiguous allocator": ("seed-prealloc.yaml", []),
    # every follow-up turn is longer than max_model_len: rejected as it arrives, the last
    # one when nothing else is left to serve (the serving loop once failed there)
    "last arrivals rejected": ({
        "name": "rejected-turns", "seed": 2, "model": "tiny-llama", "gpu": "a100-80gb",
        "engine": {"profile": "eager", "max_model_len": 64, "num_gpu_blocks_override": 24},
        "kv": {"allocator": "paged", "block_size": 16},
        "workload": {"num_requests": 3, "arrival": {"type": "constant", "rate": 1.0},
                     "prompt_tokens": {"type": "fixed", "value": 40},
                     "output_tokens": {"type": "fixed", "value": 10},
                     "conversation": {"turns": {"type": "fixed", "value": 2}, "think_time_s": 0.0}}}, []),
}


class FakeClock:
    """A clock that moves only when told: by sleeping, or by a batch's waits."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _ids(reqs) -> tuple[int, ...]:
    return tuple(r.request_id for r in reqs)


class RecordingRunner:
    """Wraps a runner: records every decision it is handed (with the idle time before it) and,
    given a fake clock, lets the batch's time pass on it as a real executor's would."""

    def __init__(self, inner, clock: FakeClock | None = None) -> None:
        self.inner, self.clock = inner, clock
        self.log: list[tuple] = []

    def swap_out(self, out):
        seconds = self.inner.swap_out(out)
        self.log.append(("swap-out", _ids(out.swapped_out), _ids(out.preempted), out.swap_out_bytes))
        if self.clock is not None:
            self.clock.sleep(seconds)
        return seconds

    def run(self, out, idle_before_s):
        waits = self.inner.run(out, idle_before_s)
        decision = (tuple((r.request_id, n) for r, n in out.scheduled), _ids(out.preempted),
                    _ids(out.swapped_out), _ids(out.swapped_in), out.decode_padding_seqs,
                    out.prefill_padding_tokens)
        self.log.append(("run", decision, idle_before_s))
        if self.clock is not None:
            for wait in waits:
                self.clock.sleep(wait.seconds)
        return waits


def _same_time(a: float, b: float) -> bool:
    # SimPy reaches an arrival time as now + (arrival - now) from its own last event, the
    # serving loop from its own: the two may differ in the last bit.
    return (math.isinf(a) and math.isinf(b)) or a == pytest.approx(b, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_simulation_and_real_engine_loop_decide_alike(case):
    name, overrides = CASES[case]
    if isinstance(name, dict):
        sc = parse_scenario(name, "/tmp/kvsim-test/serve.yaml")
    else:
        sc = load_scenario(f"{SCENARIOS}/{name}", overrides)

    # Step by step: the runner sees every batch (macro-steps advance stretches of decodes
    # without it, and give the same results: tests/sim/engine/test_macro_steps.py).
    sim = Simulation(sc, macro_steps=False)
    sim_log = RecordingRunner(sim.core.runner)
    sim.core.runner = sim_log
    simulated = sim.run()

    parts = build_parts(sc)
    clock = FakeClock()
    real_log = RecordingRunner(PredictedRunner(parts.cost), clock)
    served = serve(parts, real_log, clock=clock, sleep=clock.sleep)

    assert len(real_log.log) == len(sim_log.log) > 0
    for got, want in zip(real_log.log, sim_log.log):
        assert got[:2] == want[:2]  # the same batch, or the same swap-out, in the same order
        if got[0] == "run":
            assert _same_time(got[2], want[2])  # the same idle time before it
        else:
            assert got[2:] == want[2:]
    if case == "swap-only batches":
        assert sum(entry[0] == "swap-out" for entry in sim_log.log) >= 2
    if case == "last arrivals rejected":
        assert sum(r.reject_reason == "prompt_too_long" for r in served.requests) == 3
    if case == "static batching":
        assert any(entry[1][4] for entry in sim_log.log if entry[0] == "run")  # padding rows ran

    assert len(served.steps.rows) == len(simulated.steps.rows)
    for got, want in zip(served.steps.rows, simulated.steps.rows):
        assert got[2:] == want[2:]  # batch, queues, preemptions, swaps and KV slots of each step
        assert _same_time(got[0], want[0]) and _same_time(got[1], want[1])
    assert len(served.requests) == len(simulated.requests)
    for got, want in zip(served.requests, simulated.requests):
        assert (got.request_id, got.status, got.num_generated, got.num_preemptions) == \
            (want.request_id, want.status, want.num_generated, want.num_preemptions)
        for attr in ("arrival_s", "first_token_s", "finish_s"):
            a, b = getattr(got, attr), getattr(want, attr)
            assert (a is None and b is None) or _same_time(a, b)

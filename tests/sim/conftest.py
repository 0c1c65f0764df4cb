"""Shared helpers for the simulator-core tests: tiny requests and tiny scenarios.

Kept as fixtures (not an importable module) so tests in this folder need no package setup.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from sim.engine.simulation import Simulation
from sim.engine.logs.metrics import StepLog, summarize
from sim.request import Request, RequestStatus
from sim.config.scenario import parse_scenario

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"

#: A small sweepable scenario (tiny-llama, 40 blocks, 50 requests): the sweep and compare tests'.
TINY_SWEEP = {
    "name": "tiny-sweep", "seed": 5, "model": "tiny-llama", "gpu": "a100-80gb",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 40},
    "kv": {"allocator": "paged", "block_size": 16},
    "workload": {"num_requests": 50, "arrival": {"type": "poisson", "rate": 40.0},
                 "prompt_tokens": {"type": "uniform", "low": 20, "high": 120},
                 "output_tokens": {"type": "uniform", "low": 10, "high": 120}},
}


def new_request(request_id: int, prompt, *, output: int = 1, max_tokens: int | None = None,
                arrival_s: float = 0.0) -> Request:
    """A request whose prompt is ``prompt`` tokens of its own segment, or the given segments."""
    if isinstance(prompt, int):
        segments = ((1000 + request_id, prompt),)
    else:
        segments = tuple(prompt)
    return Request(request_id, arrival_s, segments,
                   max_tokens if max_tokens is not None else max(output, 1), output)


@pytest.fixture(scope="session")
def make_request():
    return new_request


def base_scenario(**sections) -> dict:
    """A tiny world as a raw scenario mapping: tiny-llama, 11 blocks of 16 tokens, mml 160,
    the plain (``eager``) engine profile: step times are the cost model's, nothing around them.

    ``engine``, ``kv``, ``scheduler`` update those sections key by key; any other key,
    ``workload`` included, replaces the default outright.
    """
    data = {
        "name": "tiny",
        "seed": 1,
        "model": "tiny-llama",
        "gpu": "a100-80gb",
        "engine": {"profile": "eager", "max_model_len": 160, "num_gpu_blocks_override": 11},
        "kv": {"allocator": "paged", "block_size": 16},
        "scheduler": {"policy": "continuous"},
        "workload": {
            "num_requests": 6,
            "arrival": {"type": "constant", "rate": 50.0},
            "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
            "output_tokens": {"type": "uniform", "low": 1, "high": 60},
        },
    }
    for key, value in sections.items():
        if key in ("engine", "kv", "scheduler"):
            data[key] = {**data[key], **copy.deepcopy(value)}
        else:
            data[key] = copy.deepcopy(value)
    return data


@pytest.fixture(scope="session")
def scenario_dict():
    return base_scenario


@pytest.fixture(scope="session")
def scenarios_dir() -> Path:
    return SCENARIOS


# ------------------------------------------------------------------ engine runs, checked


class CheckingStepLog(StepLog):
    """A step log that checks the allocator and the accounting after every step."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def record(self, now, duration, out, sched, allocator) -> None:
        super().record(now, duration, out, sched, allocator)
        allocator.check_invariants()
        self.sim.swap.check_invariants()
        pool = allocator.num_total_slots
        row = dict(zip(("token", "alloc", "reserved", "internal", "external", "cached"),
                       self.rows[-1][11:]))
        free = pool - row["alloc"] - row["external"]
        assert min(row.values()) >= 0 and free >= 0
        assert row["token"] + row["reserved"] + row["internal"] + row["external"] + free == pool
        assert row["token"] <= row["alloc"] <= pool
        assert row["cached"] <= free
        for req in sched.running:
            assert req.num_computed_tokens < req.num_tokens  # unfinished: one token to compute
            assert allocator.held_slots(req) >= allocator.kept_tokens(req.num_computed_tokens)
        for req in list(sched.waiting) + list(sched.swapped):  # nothing leaks from preempted requests
            assert allocator.held_slots(req) == 0 or req.request_id in sched.loaded  # (a CPU tier's loads)
        for req in sched.swapped:
            assert req.num_computed_tokens > 0


def simulate_checked(data: dict, source: str = "/tmp/kvsim-test/scenario.yaml", keep_requests: bool = False):
    """``keep_requests``: every request stays an object (its prompt segments and session
    readable) instead of being retired into the run's request log when done."""
    sim = Simulation(parse_scenario(data, source), keep_requests=keep_requests)
    sim.steps = CheckingStepLog(sim)
    result = sim.run()
    return result, summarize(result)


def check_drained(result, summary) -> None:
    reqs = summary["requests"]
    assert reqs["arrived"] == len(result.requests)
    assert reqs["arrived"] == reqs["completed"] + reqs["rejected"]
    assert reqs["in_flight"] == 0
    alloc = result.allocator
    alloc.check_invariants()
    assert alloc.num_allocated_slots() == 0
    assert alloc.num_external_fragmentation_slots() == 0
    assert result.swap.used_bytes == 0
    sched = result.scheduler
    assert not sched.has_work()
    for r in result.requests:
        if r.status is RequestStatus.FINISHED:
            assert r.num_generated == r.num_output_tokens
            assert r.arrival_s <= r.admitted_s <= r.first_token_s <= r.last_token_s <= r.finish_s
        else:
            assert r.status is RequestStatus.REJECTED and r.reject_reason
    kv = summary["kv"]
    total = (kv["mean_token_fraction"] + kv["mean_reserved_unused_fraction"]
             + kv["mean_internal_fragmentation_fraction"]
             + kv["mean_external_fragmentation_fraction"] + kv["mean_free_fraction"])
    if summary["engine"]["busy_s"] > 0:
        assert total == pytest.approx(1.0)


@pytest.fixture(scope="session")
def simulate():
    """``simulate(data, source=...) -> (result, summary)`` with per-step checks."""
    return simulate_checked


@pytest.fixture(scope="session")
def assert_drained():
    """``assert_drained(result, summary)``: the end-of-run accounting of a drained run."""
    return check_drained


@pytest.fixture(scope="session")
def tiny_sweep_scenario() -> dict:
    """A fresh copy per test session; tests write it out, never change it."""
    return copy.deepcopy(TINY_SWEEP)

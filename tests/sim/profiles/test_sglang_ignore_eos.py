"""SGLang 0.4's admission of requests that ignore EOS (sim/sched/sglang_admit.py): the ``sglang``
profile with ``workload.ignore_eos`` and prefix caching off never preempts, and admits exactly
what the rule allows."""

from __future__ import annotations

import sim.sched.base as sched_base
from sim.sched.sglang_admit import ignore_eos_fits
from tests.sim.conftest import base_scenario, check_drained, new_request, simulate_checked


def _running(prompt: int, max_tokens: int, generated: int):
    r = new_request(100 + prompt, prompt, output=max_tokens, max_tokens=max_tokens)
    r.num_generated = generated
    return r


def test_rule_at_its_boundary() -> None:
    # candidate prompt 10, 20 tokens to generate; one running request: 30 left, 40 held.
    # Finishing order: the candidate (20), then it (30); the rule needs free - 10 - 30 x 2 > 0.
    cand = new_request(1, 10, output=20, max_tokens=20)
    running = [_running(35, 35, 5)]
    assert ignore_eos_fits(running, cand, 71)
    assert not ignore_eos_fits(running, cand, 70)
    # the last step of the walk: 70 + 10 (the candidate's, freed first) - 30 x 1 > 0 holds, so the first binds
    assert not ignore_eos_fits([], new_request(2, 10, output=20, max_tokens=20), 30)
    assert ignore_eos_fits([], new_request(3, 10, output=20, max_tokens=20), 31)


def _scenario(ignore_eos: bool) -> dict:
    return base_scenario(  # 640 tokens of pool: a dozen requests at most
engine={"profile": "sglang", "num_gpu_blocks_override": 40, "max_model_len": 400},
                         scheduler={"policy": "chunked-prefill", "max_num_batched_tokens": 128},
                         kv={"prefix_caching": False},
                         workload={"num_requests": 60, "arrival": {"type": "poisson", "rate": 200.0},
                                   "prompt_tokens": {"type": "uniform", "low": 20, "high": 150},
                                   "output_tokens": {"type": "uniform", "low": 10, "high": 120},
                                   "ignore_eos": ignore_eos})


def test_never_preempts_and_admits_what_the_rule_allows(monkeypatch) -> None:
    calls = []

    def recorded(running, req, free):
        ok = ignore_eos_fits(running, req, free)
        calls.append((req, ok))
        return ok

    monkeypatch.setattr(sched_base, "ignore_eos_fits", recorded)
    result, summary = simulate_checked(_scenario(True))
    check_drained(result, summary)
    assert summary["requests"]["completed"] == 60
    pre = summary["preemptions"]
    assert pre["recompute"] == 0 and pre["swap"] == 0
    for r in result.requests:
        assert r.max_tokens == r.num_output_tokens == r.num_generated and r.num_preemptions == 0
    refused = [req for req, ok in calls if not ok]
    assert refused  # the pool was tight: the rule held requests back
    assert any(ok for _, ok in calls)  # and admitted others while requests ran


def test_refusal_stops_the_steps_admissions(monkeypatch) -> None:
    """A refused request blocks the queue (SGLang's NO_TOKEN ends the step's admissions)."""
    seen = []
    real = sched_base.SchedulerBase._admit_waiting

    def spy(self, out, budget, chunked, cap=0):
        left = real(self, out, budget, chunked, cap)
        if self.waiting and self.running and self.ignore_eos_admission and budget > 0:
            head = self.waiting[0]
            free = self.allocator.num_total_slots - self.allocator.num_allocated_slots()
            seen.append(ignore_eos_fits(self.running, head, free) or len(self.running) >= self.max_num_seqs
                        or left <= 0 or head.num_computed_tokens > 0)
        return left

    monkeypatch.setattr(sched_base.SchedulerBase, "_admit_waiting", spy)
    result, summary = simulate_checked(_scenario(True))
    check_drained(result, summary)
    assert seen and False in seen  # the head was left waiting because the rule refused it


def test_without_ignore_eos_the_same_load_preempts() -> None:
    result, summary = simulate_checked(_scenario(False))
    check_drained(result, summary)
    assert summary["preemptions"]["recompute"] + summary["preemptions"]["swap"] > 0
    assert not result.scheduler.ignore_eos_admission

"""SGLang's prefill-only steps under chunked prefill (sim/sched/continuous.py ``_prefill_only_step``):
the ``sglang`` profile's default, as SGLang runs with ``enable_mixed_chunk`` off."""

from __future__ import annotations

from sim.config.scenario import parse_scenario
from sim.cost.profile import PROFILES
from sim.engine.simulation import Simulation


def _run(scenario_dict, tmp_path, **overrides):
    data = scenario_dict(engine={"num_gpu_blocks_override": 400, "profile": "sglang", "profile_overrides": overrides},
                         scheduler={"policy": "chunked-prefill", "max_num_batched_tokens": 64},
                         kv={"prefix_caching": False},
                         workload={"num_requests": 40, "arrival": {"type": "poisson", "rate": 40.0},
                                   "prompt_tokens": {"type": "uniform", "low": 20, "high": 150},
                                   "output_tokens": {"type": "uniform", "low": 2, "high": 40}})
    sim = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")))
    return sim, sim.run()


def _mixed(steps) -> int:
    return int(((steps["num_prefill_tokens"] > 0) & (steps["num_decode_tokens"] > 0)).sum())


def test_sglang_profile_runs_prefill_first() -> None:
    assert PROFILES["sglang"].prefill_first and PROFILES["sglang"].chunked_prefill


def test_chunked_prefill_first_never_mixes_prompt_chunks_with_decodes(scenario_dict, tmp_path) -> None:
    sim, result = _run(scenario_dict, tmp_path)
    steps = result.steps.array()
    assert _mixed(steps) == 0
    assert int((steps["num_prefill_tokens"] > 64).sum()) == 0  # a prefill step stays within the chunk budget
    chunked = int((steps["num_prefill_tokens"] == 64).sum())
    assert chunked > 0  # prompts longer than the budget were split over steps
    assert len(sim.scheduler.finished) == 40 and not sim.scheduler.rejected
    for req in result.requests:  # every prompt computed once, every token generated
        assert req.num_generated == req.num_output_tokens


def test_mixed_chunks_when_prefill_first_is_off(scenario_dict, tmp_path) -> None:
    _, result = _run(scenario_dict, tmp_path, prefill_first=False)
    assert _mixed(result.steps.array()) > 0

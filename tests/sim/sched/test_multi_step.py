"""vLLM V0's multi-step scheduling (profile ``scheduler_steps``, ``--num-scheduler-steps``)."""

from __future__ import annotations

import pytest

from sim.config.scenario import parse_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation
from sim.errors import ConfigError


def _run(scenario_dict, tmp_path, steps=None, rate=20.0):
    overrides = {} if steps is None else {"scheduler_steps": steps}
    data = scenario_dict(engine={"num_gpu_blocks_override": 400, "profile": "vllm-v0",
                                 "profile_overrides": overrides},
                         scheduler={"policy": "continuous"},
                         workload={"num_requests": 40, "arrival": {"type": "poisson", "rate": rate},
                                   "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                                   "output_tokens": {"type": "uniform", "low": 4, "high": 40}})
    outs, box = [], {}

    def hook(out):
        sched = box["sim"].scheduler
        outs.append((out.num_prefill_tokens, out.num_decode_tokens, sched.block_left, len(sched.waiting),
                     len(sched.running) == len(out.scheduled)))

    sim = box["sim"] = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")), step_hook=hook)
    result = sim.run()
    return outs, summarize(result)


@pytest.mark.parametrize("steps", [4, 10])
def test_a_round_of_decodes_admits_nothing_until_it_ends(steps, scenario_dict, tmp_path) -> None:
    outs, summary = _run(scenario_dict, tmp_path, steps)
    r = summary["requests"]
    assert r["arrived"] == 40 == r["completed"] + r["rejected"] + r["in_flight"] and r["completed"] == 40
    # inside a round (steps of it still to run) the next step admits no prompt, unless every
    # request of the round finished (the step's requests are then all new)
    for (_, _, left, _, _), (prefill, _, _, _, only_new) in zip(outs, outs[1:]):
        if left > 0 and prefill > 0:
            assert only_new
    rounds = [o for o in outs if o[2] == steps - 1]  # the first step of each round of decodes
    assert len(rounds) > 5 and all(o[0] == 0 and o[1] > 0 for o in rounds)
    # and arrivals were held back: requests waited while a round ran
    assert any(left > 0 and waiting > 0 for _, _, left, waiting, _ in outs)


def test_one_step_a_round_is_the_default(scenario_dict, tmp_path) -> None:
    (one, s_one), (default, s_default) = _run(scenario_dict, tmp_path, 1), _run(scenario_dict, tmp_path, None)
    assert one == default and all(o[2] == 0 for o in one)
    assert s_one["ttft_s"] == s_default["ttft_s"] and s_one["e2e_s"] == s_default["e2e_s"]


def test_waiting_for_the_round_lengthens_ttft_not_the_decode(scenario_dict, tmp_path) -> None:
    _, one = _run(scenario_dict, tmp_path, 1, rate=20.0)
    _, ten = _run(scenario_dict, tmp_path, 10, rate=20.0)
    # requests 50 ms apart against rounds of ten ~4 ms steps: most arrive during a round and wait
    assert ten["ttft_s"]["p50"] > one["ttft_s"]["p50"] * 2
    assert ten["tpot_s"]["p50"] == pytest.approx(one["tpot_s"]["p50"], rel=0.25)


def test_scheduler_steps_must_be_a_positive_integer(scenario_dict, tmp_path) -> None:
    with pytest.raises(ConfigError, match="scheduler_steps"):
        _run(scenario_dict, tmp_path, 0)

"""A pipeline stage's step time and the activation transfer between stages (sim/cost/pipeline.py)."""

from __future__ import annotations

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.build import build_cost_model
from sim.cost.pipeline import build_pipeline_cost
from sim.cost.profile import PROFILES, ProfileName
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model
from sim.model.parallel import stage_models

SHAPES = [BatchShape.decode(1, 128), BatchShape.decode(64, 2000), BatchShape.prefill(512, 1024)]
EAGER = PROFILES[ProfileName.EAGER]


def _pipeline(model: str, cal: str, pp: int, tp: int = 1, profile=EAGER):
    return build_pipeline_cost(load_model(model), load_calibration(cal), profile, pipeline_parallel_size=pp,
                               max_num_seqs=256, tensor_parallel_size=tp)


@pytest.mark.parametrize("shape", SHAPES)
def test_only_the_last_stage_computes_the_logits(shape: BatchShape) -> None:
    model, cal = load_model("llama-3-8b"), load_calibration("a100-80gb")
    pipe = _pipeline("llama-3-8b", "a100-80gb", 2)
    first, last = pipe.stage_times_s(shape)
    half = build_cost_model(stage_models(model, 2)[0], cal)  # 16 layers, lm_head included
    assert last == pytest.approx(half.step_time_s(shape))
    assert first == pytest.approx(half.step_time_s(shape._replace(num_seqs=0)))
    assert first < last
    # two stages of 16 layers do the 32 layers' work and the lm_head once; each stage pays the
    # step overhead (its own worker) and looks up embeddings (a few bytes per token)
    whole = build_cost_model(model, cal).step_time_s(shape)
    assert first + last - cal.step_overhead_s == pytest.approx(whole, rel=0.01)


@pytest.mark.parametrize("tp", [1, 4])
def test_transfer_is_hidden_states_and_residual_over_the_p2p_link(tp: int) -> None:
    cal = load_calibration("h100-sxm")
    ic = cal.interconnect
    pipe = _pipeline("llama-3-70b", "h100-sxm", 2, tp)
    shape = BatchShape.decode(64, 1000)
    nbytes = 2 * 64 * 8192 * 2  # hidden states + residual, tokens x hidden x bf16
    expected = ic.p2p_s(nbytes / tp) + (ic.allgather_s(nbytes, tp) if tp > 1 else 0.0)
    assert pipe.transfer_s(shape) == pytest.approx(expected)
    assert pipe.step_time_s(shape) == pytest.approx(sum(pipe.stage_times_s(shape)) + expected)
    assert pipe.transfer_s(BatchShape.decode(0, 0)) == 0.0


def test_stages_are_a_quarter_of_the_work_at_pp_4() -> None:
    pipe = _pipeline("llama-3-70b", "h100-sxm", 4, tp=2, profile=PROFILES[ProfileName.VLLM_V1])
    assert pipe.stage_layers == (20, 20, 20, 20) and pipe.num_stages == 4
    times = pipe.stage_times_s(BatchShape.decode(32, 1000))
    assert times[0] == pytest.approx(times[1]) and times[1] == pytest.approx(times[2])
    assert times[3] > times[2]  # the lm_head and the logits


def test_a_calibration_without_p2p_numbers_is_an_error() -> None:
    with pytest.raises(ConfigError) as err:
        _pipeline("llama-3-8b", "cpu-epyc-2core", 2)
    assert err.value.key == "interconnect" and "pipeline_parallel_size 2" in err.value.message

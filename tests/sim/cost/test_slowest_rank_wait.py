"""The all-reduces' wait for the slowest rank (issue #41): its form, and where a step pays it."""

from __future__ import annotations

import dataclasses

import pytest

from sim.calib.calibration import load_calibration
from sim.cost import collectives as coll
from sim.cost.build import build_cost_model
from sim.cost.shape import BatchShape
from sim.model.hf_config import load_model


def test_the_wait_is_the_jitter_times_the_harmonic_excess() -> None:
    j = 4.0e-6
    assert coll.slowest_rank_wait_s(1, j) == 0.0
    assert coll.slowest_rank_wait_s(2, j) == pytest.approx(0.5 * j)
    assert coll.slowest_rank_wait_s(4, j) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) * j)
    assert coll.slowest_rank_wait_s(8, j) == pytest.approx(sum(1 / k for k in range(2, 9)) * j)
    waits = [coll.slowest_rank_wait_s(tp, j) for tp in (2, 4, 8)]
    assert waits == sorted(waits) and waits[2] - waits[1] < waits[1] - waits[0] + 0.5 * j  # grows, ever slower


def test_the_module_constant_is_the_default() -> None:
    assert coll.slowest_rank_wait_s(8) == coll.slowest_rank_wait_s(8, coll.TP_RANK_JITTER_S)
    assert coll.TP_RANK_JITTER_S > 0.0


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_each_all_reduce_of_a_step_pays_it_once(tp: int) -> None:
    model, cal = load_model("llama-2-7b"), load_calibration("a100-80gb")
    cm = build_cost_model(model, cal, tensor_parallel_size=tp)
    no_wait = dataclasses.replace(cm, collectives=cm.collectives._replace(wait_s=0.0))
    expected = (2 * model.num_layers + 1) * coll.slowest_rank_wait_s(tp)
    for shape in (BatchShape.decode(1, 128), BatchShape.decode(64, 4000), BatchShape.prefill(2048, 2048)):
        assert cm.step_time_s(shape) - no_wait.step_time_s(shape) == pytest.approx(expected, rel=1e-9)


def test_its_share_of_a_step_shrinks_as_the_batch_grows() -> None:
    """A fixed cost per all-reduce: a visible share of a batch-1 decode, next to none of a long prefill."""
    model, cal = load_model("llama-2-7b"), load_calibration("a100-80gb")
    cm = build_cost_model(model, cal, tensor_parallel_size=8)
    wait = (2 * model.num_layers + 1) * coll.slowest_rank_wait_s(8)
    small, big = cm.step_time_s(BatchShape.decode(1, 128)), cm.step_time_s(BatchShape.prefill(8192, 8192))
    assert wait / small > 10 * wait / big


def test_one_gpu_has_no_collectives_and_no_wait() -> None:
    assert build_cost_model(load_model("llama-2-7b"), load_calibration("a100-80gb")).collectives is None

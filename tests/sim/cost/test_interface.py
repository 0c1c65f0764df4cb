"""The cost model's interface: both models implement it, and the engine charges a batch its shape."""

from __future__ import annotations

import inspect

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.base import CostModel, decode_step_time_s, prefill_time_s
from sim.cost.build import build_cost_model
from sim.cost.datasheet import DatasheetCost
from sim.cost.fitted import FittedCost
from sim.cost.shape import BatchShape
from sim.engine.step.predict import after_idle_replay_s, kernel_sum_cost, predicted_step_s, predicted_transfer_s
from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace
from sim.model.hf_config import load_model
from sim.config.scenario import PreemptionMode
from sim.sched.output import SchedulerOutput
from sim.sched.preemption import Preemptor
from sim.sched.static import StaticScheduler

CALS = {"a100-80gb": DatasheetCost, "cpu-epyc-2core": FittedCost}


@pytest.fixture(scope="module", params=list(CALS))
def cost(request):
    return build_cost_model(load_model("tiny-llama"), load_calibration(request.param))


def test_the_calibration_picks_the_model_once(cost) -> None:
    assert type(cost) is CALS[cost.calibration_name] and isinstance(cost, CostModel)
    assert cost.model_name == "tiny-llama"


@pytest.mark.parametrize("cls", [DatasheetCost, FittedCost])
def test_both_models_implement_every_member_of_the_interface(cls) -> None:
    fields = set(getattr(cls, "__dataclass_fields__", {}))
    for name in ("model_name", "calibration_name", "kv_dtype", "composition"):
        assert name in fields or isinstance(getattr(cls, name, None), property), name
    for name in ("step_time_s", "swap_time_s", "staging_time_s", "without_composition"):
        want = inspect.signature(getattr(CostModel, name)).parameters
        got = inspect.signature(getattr(cls, name)).parameters
        assert [(p.name, p.default) for p in got.values()] == [(p.name, p.default) for p in want.values()], name


def test_without_composition_is_the_plain_kernel_sum(cost) -> None:
    shape = BatchShape(num_seqs=3, num_prefill_tokens=40, num_decode_tokens=2, decode_kv_tokens=300,
                       prefill_attn_pairs=40 * 20.5, prefill_kv_tokens=40)
    raw = cost.without_composition()
    assert raw.composition is None and raw.without_composition() is raw
    if isinstance(cost, DatasheetCost):
        assert raw is cost and kernel_sum_cost(cost) is None and after_idle_replay_s(cost) == 0.0
    else:
        assert cost.composition is not None  # the shipped CPU calibration has one
        assert kernel_sum_cost(cost) == raw and after_idle_replay_s(cost) == cost.composition.idle_s
        assert raw.step_time_s(shape) == sum(cost.step_parts(shape).values())
        assert cost.step_time_s(shape) == cost.composition.apply(cost.step_parts(shape), cost.num_layers)


def test_prefill_and_decode_shorthands_are_their_shapes(cost) -> None:
    assert prefill_time_s(cost, 100, num_cached_tokens=30) == cost.step_time_s(BatchShape.prefill(70, 30))
    assert prefill_time_s(cost, 30, num_cached_tokens=30) == 0.0
    assert decode_step_time_s(cost, batch_size=4, context_tokens=50) == cost.step_time_s(BatchShape.decode(4, 50))
    assert BatchShape.prefill(70, 30).prefill_attn_pairs == 70 * (30 + 71 / 2)
    assert BatchShape.decode(4, 50).decode_kv_tokens == 200 and BatchShape.decode(4, 50).num_tokens == 4


# -- the scheduler hands the cost model one value -----------------------------------------------

def _static_outputs(make_request) -> list[SchedulerOutput]:
    """A static batch of prompts 20 and 50: padded prefill, then a decode with a padded row."""
    alloc = PagedAllocator(11, 16)
    sched = StaticScheduler(alloc, Preemptor(PreemptionMode.RECOMPUTE, alloc, SwapSpace(10**9), 2.0),
                            max_num_seqs=8, max_num_batched_tokens=1000, max_model_len=1000,
                            reject_when_full=False)
    sched.add_request(make_request(0, 20, output=1))
    sched.add_request(make_request(1, 50, output=3))
    outs = []
    for now in (1.0, 2.0):
        outs.append(sched.schedule())
        sched.update_from_output(outs[-1], now)
    return outs


def test_batch_shape_counts_static_batching_padding(make_request) -> None:
    prefill, decode = (out.batch_shape() for out in _static_outputs(make_request))
    assert prefill == BatchShape(num_seqs=2, num_prefill_tokens=100, num_decode_tokens=0, decode_kv_tokens=0,
                                 prefill_attn_pairs=20 * 21 / 2 + 50 * 51 / 2, prefill_kv_tokens=70,
                                 num_prefill_seqs=2)
    assert decode == BatchShape(num_seqs=2, num_prefill_tokens=0, num_decode_tokens=2, decode_kv_tokens=51 + 21,
                                prefill_attn_pairs=0.0, prefill_kv_tokens=0, num_prefill_seqs=0)


def test_lone_prefill_and_decode_batches_are_the_shorthand_shapes(make_request) -> None:
    req = make_request(0, 100)
    req.num_computed_tokens = 30  # a cached prefix
    out = SchedulerOutput()
    out.add(req, 70)
    assert out.batch_shape() == BatchShape.prefill(70, 30)
    out = SchedulerOutput()
    for i in range(4):
        r = make_request(i, 49, output=5)
        r.num_computed_tokens, r.num_generated = 49, 1
        out.add(r, 1)
    assert out.batch_shape() == BatchShape.decode(4, 50)


@pytest.mark.parametrize("idle_before_s", [0.0, 1.0])
def test_the_engine_charges_the_batch_shape(cost, make_request, idle_before_s) -> None:
    for out in _static_outputs(make_request):
        assert predicted_step_s(cost, out, idle_before_s) == cost.step_time_s(out.batch_shape(), idle_before_s)
        assert predicted_step_s(cost, out, idle_before_s) > 0
    swaps = SchedulerOutput(swap_out_bytes=1 << 20, swap_copies=64, swap_staged_bytes=1 << 20,
                            swap_staging_launches=64)
    assert predicted_transfer_s(cost, swaps) == cost.swap_time_s(1 << 20, 64) + cost.staging_time_s(1 << 20, 64)

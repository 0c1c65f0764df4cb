"""Swaps move KV block by block, per layer, for K and V: many small copies cost more."""

from __future__ import annotations

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.build import build_cost_model
from sim.cost.datasheet import PCIE_COPY_LATENCY_S
from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace
from sim.model.hf_config import load_model
from sim.config.scenario import PreemptionMode
from sim.sched.continuous import ContinuousScheduler
from sim.sched.preemption import Preemptor


def test_copies_add_a_fixed_cost_each() -> None:
    cm = build_cost_model(load_model("llama-3-8b"), load_calibration("a100-80gb"))
    one = cm.swap_time_s(1 << 20)
    many = cm.swap_time_s(1 << 20, num_copies=1000)
    assert many - one == pytest.approx(999 * PCIE_COPY_LATENCY_S)
    assert cm.swap_time_s(0, num_copies=50) == 0.0


def test_fitted_copies_use_the_measured_overhead() -> None:
    cm = build_cost_model(load_model("llama-3-8b"), load_calibration("cpu-epyc-2core"))
    assert cm.swap_time_s(1 << 20, num_copies=64) > cm.swap_time_s(1 << 20, num_copies=1)


def test_a_swapped_request_counts_its_blocks_times_layers_both_ways(make_request) -> None:
    alloc = PagedAllocator(11, 16)
    pre = Preemptor(PreemptionMode.SWAP, alloc, SwapSpace(10**9), 2.0, copies_per_block=64)
    sched = ContinuousScheduler(alloc, pre, chunked=False, max_num_seqs=8, max_num_batched_tokens=1000,
                                max_model_len=1000, reject_when_full=False)
    a, b = make_request(0, 80, output=3, max_tokens=3), make_request(1, 80, output=50, max_tokens=50)
    sched.add_request(a)
    sched.add_request(b)
    out = sched.schedule()  # both prompts: 5 + 5 blocks
    sched.update_from_output(out, 1.0)
    out = sched.schedule()  # a grows into the last block; b cannot: b (5 blocks) swaps out
    assert [r.request_id for r in out.swapped_out] == [1]
    assert out.swap_copies == 5 * 64
    sched.update_from_output(out, 2.0)
    out = sched.schedule()  # a's third and last token
    assert sched.update_from_output(out, 3.0) == [a]
    out = sched.schedule()  # room again: b comes back with its 5 blocks
    assert [r.request_id for r in out.swapped_in] == [1] and out.swap_copies == 5 * 64


def test_a_gathered_swap_is_one_copy_per_layer_plus_device_staging(make_request) -> None:
    from sim.kv.swap import SwapTransfer

    alloc = PagedAllocator(11, 16)
    pre = Preemptor(PreemptionMode.SWAP, alloc, SwapSpace(10**9), 2.0, copies_per_block=64,
                    transfer=SwapTransfer.GATHERED)
    sched = ContinuousScheduler(alloc, pre, chunked=False, max_num_seqs=8, max_num_batched_tokens=1000,
                                max_model_len=1000, reject_when_full=False)
    a, b = make_request(0, 80, output=3, max_tokens=3), make_request(1, 80, output=50, max_tokens=50)
    sched.add_request(a)
    sched.add_request(b)
    sched.update_from_output(sched.schedule(), 1.0)
    out = sched.schedule()  # b's 5 blocks go out, packed: 64 copies, 64 gather launches
    assert [r.request_id for r in out.swapped_out] == [1]
    assert (out.swap_copies, out.swap_staging_launches) == (64, 64)
    assert out.swap_staged_bytes == out.swap_out_bytes == 80 * 2
    sched.update_from_output(out, 2.0)
    sched.update_from_output(sched.schedule(), 3.0)
    out = sched.schedule()
    assert [r.request_id for r in out.swapped_in] == [1]
    assert (out.swap_copies, out.swap_staging_launches, out.swap_staged_bytes) == (64, 64, out.swap_in_bytes)


@pytest.mark.parametrize("cal", ["a100-80gb", "cpu-epyc-2core"])
def test_gathering_many_small_blocks_is_cheaper_than_copying_each(cal) -> None:
    from sim.engine.step.predict import predicted_transfer_s
    from sim.sched.output import SchedulerOutput

    cm = build_cost_model(load_model("llama-3-8b"), load_calibration(cal))
    nbytes = 200 * 16 * 131072  # 200 blocks of 16 tokens
    per_block = SchedulerOutput(swap_out_bytes=nbytes, swap_copies=200 * 64)
    gathered = SchedulerOutput(swap_out_bytes=nbytes, swap_copies=64, swap_staged_bytes=nbytes,
                               swap_staging_launches=64)
    assert predicted_transfer_s(cm, per_block) == cm.swap_time_s(nbytes, 200 * 64)
    assert predicted_transfer_s(cm, gathered) == pytest.approx(cm.swap_time_s(nbytes, 64)
                                                               + cm.staging_time_s(nbytes, 64))
    assert cm.staging_time_s(nbytes, 64) > 0
    if cal == "a100-80gb":  # 10 us per copy: 12,800 copies cost far more than one device pass
        assert predicted_transfer_s(cm, gathered) < predicted_transfer_s(cm, per_block)

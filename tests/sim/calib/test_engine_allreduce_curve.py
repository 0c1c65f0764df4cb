"""A GPU count's measured curve of the engine's own all-reduce kernel
(``by_num_gpus.N.engine_allreduce_curve``, imported from aiconfigurator-core's custom all-reduce
tables): it times the messages below the engine's bound, NCCL's curve those above, and neither on a
PCIe link or without an engine choice; a tensor-parallel step's collectives take it exactly."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sim.calib.allreduce_curve import AllReduceCurve
from sim.calib.calibration import calibration_file, calibration_from_dict, calibration_to_dict, load_calibration
from sim.calib.interconnect import interconnect_from_dict, interconnect_to_dict
from sim.cost.build import build_profiled_cost, with_profile_allreduce
from sim.cost.collectives import VLLM_CUSTOM_ALLREDUCE, build_collectives, collectives_s, slowest_rank_wait_s
from sim.cost.profile import PROFILES
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model

TOP = {"allreduce_bus_bandwidth_bytes_per_s": 4e11, "allreduce_latency_s": 8e-6, "link": "nvlink4"}
NCCL = [[262144, 19.2e-6], [2097152, 38.2e-6], [16777216, 121.9e-6]]
MINE = [[256, 4.7e-6], [16384, 5.3e-6], [1048576, 15.0e-6], [8388608, 50.7e-6]]
SECTION = TOP | {"by_num_gpus": {8: {"allreduce_curve": NCCL, "engine_allreduce_curve": MINE}}}
MiB = 1 << 20


def test_below_the_engines_bound_its_own_curve_times_the_all_reduce_and_nccls_above() -> None:
    plain = interconnect_from_dict(SECTION, file="x.yaml")
    vllm = dataclasses.replace(plain, engine_allreduce=VLLM_CUSTOM_ALLREDUCE)  # its kernel below 8 MiB
    per_byte = vllm.allreduce_s_per_byte(8)
    half = (16384 + 1048576) / 2
    assert vllm.allreduce_s(half, 8) == pytest.approx((5.3e-6 + 15.0e-6) / 2, rel=1e-12)
    assert vllm.allreduce_s(256, 8) == 4.7e-6  # a point: its own time, under the form's 8 us latency
    below = 8 * MiB - 1  # just under the bound: the engine's curve, not NCCL's
    assert vllm.allreduce_s(below, 8) == pytest.approx(
        vllm.numbers(8).engine_allreduce_curve.seconds(below, per_byte, 8e-6), rel=1e-12)
    assert vllm.allreduce_s(8 * MiB, 8) == vllm.numbers(8).allreduce_curve.seconds(8 * MiB, per_byte, 8e-6)
    # no engine choice (eager): the latency + bandwidth form; a PCIe link: NCCL for every size
    assert plain.allreduce_s(256, 8) == pytest.approx(8e-6 + 256 * per_byte, rel=1e-12)
    pcie = dataclasses.replace(vllm, link="pcie4")
    assert pcie.allreduce_s(256, 8) == pcie.numbers(8).allreduce_curve.seconds(256, per_byte, 8e-6)
    # an engine that sends everything to NCCL never takes its own curve
    assert dataclasses.replace(plain, engine_allreduce=()).engine_curve(8) is None
    assert vllm.engine_curve(4) is None  # a count without the curve


def test_the_engine_curve_round_trips_and_a_bad_one_is_one_line() -> None:
    base = yaml.safe_load(calibration_file("h100-sxm").read_text())
    cal = calibration_from_dict(base | {"interconnect": SECTION}, file="x.yaml")
    assert cal.interconnect.numbers(8).engine_allreduce_curve == AllReduceCurve(
        tuple(float(s) for s, _ in MINE), tuple(t for _, t in MINE))
    again = calibration_from_dict(yaml.safe_load(yaml.safe_dump(calibration_to_dict(cal))), file="y.yaml")
    assert again.interconnect == cal.interconnect
    assert interconnect_to_dict(cal.interconnect)["interconnect"]["by_num_gpus"][8]["engine_allreduce_curve"] == MINE
    with pytest.raises(ConfigError) as err:
        interconnect_from_dict(TOP | {"by_num_gpus": {8: {"engine_allreduce_curve": [[1, 1e-6]]}}}, file="bad.yaml")
    assert err.value.key == "interconnect.by_num_gpus.8.engine_allreduce_curve" and "\n" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        interconnect_from_dict(TOP | {"by_num_gpus": {8: {"engine_curve": MINE}}}, file="bad.yaml")
    assert "engine_allreduce_curve" in str(err.value)  # the allowed keys are named


def test_a_tp8_decode_step_pays_the_engine_curve_for_each_all_reduce() -> None:
    """Llama-3-70B on TP 8 under vllm-v1, batch 8: each of the 2 x 80 + 1 all-reduces of
    8 x 8192 x 2 bytes takes the engine curve's time (plus the launch) instead of the form's, so
    the step moves by exactly that many times the difference."""
    model = load_model("llama-3-70b")
    prof = PROFILES["vllm-v1"]
    plain_cal = dataclasses.replace(load_calibration("h100-sxm"), interconnect=interconnect_from_dict(
        TOP | {"by_num_gpus": {8: {"allreduce_curve": NCCL}}}, file="x.yaml"))
    cal = dataclasses.replace(plain_cal, interconnect=interconnect_from_dict(SECTION, file="x.yaml"))
    ic = with_profile_allreduce(cal, prof).interconnect
    n = 8
    nbytes = n * model.hidden_size * 2
    own = ic.engine_curve(8)[0].seconds(nbytes, ic.allreduce_s_per_byte(8), ic.allreduce_latency(8))
    form = ic.allreduce_latency(8) + nbytes * ic.allreduce_s_per_byte(8)
    assert own < form  # the measured kernel beats the 8 us latency at this size
    shape = BatchShape.decode(n, 1000 * n)
    with_curve = build_profiled_cost(model, cal, prof, max_num_seqs=256, tensor_parallel_size=8)
    without = build_profiled_cost(model, plain_cal, prof, max_num_seqs=256, tensor_parallel_size=8)
    delta = with_curve.step_time_s(shape) - without.step_time_s(shape)
    assert delta == pytest.approx((2 * model.num_layers + 1) * (own - form), rel=1e-6)
    coll = build_collectives(model, with_profile_allreduce(cal, prof), 8, 2.0, 0.0)
    wait = slowest_rank_wait_s(8)  # each all-reduce's wait for the slowest rank, on top of its kernel
    assert collectives_s(coll, n, 0) == pytest.approx((2 * model.num_layers + 1) * (own + wait), rel=1e-12)

"""A GPU count's measured NCCL all-reduce curve (``by_num_gpus.N.allreduce_curve``): read, written,
checked; which all-reduces take it is the engine profile's choice (its own kernel for small
messages, NCCL above); and a tensor-parallel step's collectives take it exactly."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sim.calib.allreduce_curve import AllReduceCurve, curve_from_list
from sim.calib.calibration import calibration_file, calibration_from_dict, calibration_to_dict, load_calibration
from sim.calib.interconnect import interconnect_from_dict, interconnect_to_dict
from sim.cli.main import main
from sim.cost.build import build_cost_model, build_profiled_cost, with_profile_allreduce
from sim.cost.collectives import TRTLLM_CUSTOM_ALLREDUCE
from sim.cost.profile import PROFILES
from sim.cost.profile_setup import with_calibration
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model

TOP = {"allreduce_bus_bandwidth_bytes_per_s": 2.3e11, "allreduce_latency_s": 1e-5, "link": "nvlink3"}
#: 8x A100-SXM4 nccl-tests points (us): flat floor, then the mid-size rise
POINTS = [[32768, 32e-6], [1048576, 76.7e-6], [16777216, 245.1e-6], [67108864, 589.5e-6]]
SECTION = TOP | {"by_num_gpus": {8: {"allreduce_curve": POINTS}}}


def test_the_curve_interpolates_between_points_holds_its_floor_and_grows_at_the_bus_bandwidth_past_the_end() -> None:
    curve = curve_from_list(POINTS, file="x.yaml", key="k")
    per_byte = 1.75 / 2.3e11
    slope = (76.7e-6 - 32e-6) / (1048576 - 32768)  # below the smallest point: the first two points' line
    assert curve.seconds(100, per_byte) == pytest.approx(32e-6 - (32768 - 100) * slope, rel=1e-12)
    assert curve.seconds(100, per_byte, floor_s=31e-6) == 31e-6  # never under the count's latency
    assert curve.seconds(100, per_byte, floor_s=40e-6) == 32e-6  # nor over the smallest point
    assert curve.seconds(1048576, per_byte) == 76.7e-6  # a point: its own time
    mid = (1048576 + 16777216) / 2
    assert curve.seconds(mid, per_byte) == pytest.approx((76.7e-6 + 245.1e-6) / 2, rel=1e-12)
    past = 67108864 + 1e8
    assert curve.seconds(past, per_byte) == pytest.approx(589.5e-6 + 1e8 * per_byte, rel=1e-12)
    sizes = [2 ** k for k in range(0, 30)]  # never falls as the message grows
    times = [curve.seconds(s, per_byte, floor_s=1e-5) for s in sizes]
    assert times == sorted(times) and times[0] > 1e-5
    dip = curve_from_list([[4096, 30e-6], [8192, 28e-6], [65536, 40e-6]], file="x.yaml", key="k")
    assert dip.seconds(1, per_byte, floor_s=1e-5) == 30e-6  # a first segment that falls: flat below it


@pytest.mark.parametrize(("curve", "key", "says"), [
    ([[1024, 1e-5]], "interconnect.by_num_gpus.8.allreduce_curve", "two or more"),
    ("fast", "interconnect.by_num_gpus.8.allreduce_curve", "two or more"),
    ([[1024, 1e-5], [1024, 2e-5]], "interconnect.by_num_gpus.8.allreduce_curve[1]", "strictly increasing"),
    ([[1024, 1e-5], [4096, -1.0]], "interconnect.by_num_gpus.8.allreduce_curve[1]", "seconds"),
    ([[1024, 1e-5], [4096]], "interconnect.by_num_gpus.8.allreduce_curve[1]", "[bytes, seconds]"),
    ([[0, 1e-5], [4096, 2e-5]], "interconnect.by_num_gpus.8.allreduce_curve[0]", "bytes"),
    ([[1024, 1e-5], [4096, True]], "interconnect.by_num_gpus.8.allreduce_curve[1]", "seconds"),
])
def test_a_bad_curve_is_one_line_naming_the_file_and_the_point(curve, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        interconnect_from_dict(TOP | {"by_num_gpus": {8: {"allreduce_curve": curve}}}, file="bad.yaml")
    assert err.value.file == "bad.yaml" and err.value.key == key and says in str(err.value)
    assert "\n" not in str(err.value)


def test_the_curve_round_trips_through_a_calibration_yaml() -> None:
    base = yaml.safe_load(calibration_file("a100-80gb").read_text())
    cal = calibration_from_dict(base | {"interconnect": SECTION}, file="x.yaml")
    assert cal.interconnect.numbers(8).allreduce_curve == AllReduceCurve(
        tuple(float(s) for s, _ in POINTS), tuple(t for _, t in POINTS))
    assert cal.interconnect.numbers(4).allreduce_curve is None  # a count of its own only
    again = calibration_from_dict(yaml.safe_load(yaml.safe_dump(calibration_to_dict(cal))), file="y.yaml")
    assert again.interconnect == cal.interconnect
    assert interconnect_to_dict(cal.interconnect)["interconnect"]["by_num_gpus"] == {8: {"allreduce_curve": POINTS}}


def test_the_engine_picks_which_messages_take_the_curve() -> None:
    """TensorRT-LLM's AUTO: its one-shot kernel below 16 MB at 2 GPUs, 1 MB at 4, 500 KB at 8
    (the latency + bandwidth form), NCCL above (the curve); no engine choice: the form for all;
    no custom kernel: the curve for all; a PCIe link: NCCL for all."""
    section = TOP | {"by_num_gpus": {n: {"allreduce_curve": POINTS} for n in (2, 4, 8)}}
    plain = interconnect_from_dict(section, file="x.yaml")
    trt = dataclasses.replace(plain, engine_allreduce=TRTLLM_CUSTOM_ALLREDUCE)
    for n, bound in ((2, 16e6), (4, 1e6), (8, 5e5)):
        linear = plain.allreduce_latency(n) + (bound - 1) * plain.allreduce_s_per_byte(n)
        assert trt.allreduce_s(bound - 1, n) == pytest.approx(linear, rel=1e-12)
        curve = trt.numbers(n).allreduce_curve.seconds(bound, trt.allreduce_s_per_byte(n))
        assert trt.allreduce_s(bound, n) == curve and curve > plain.allreduce_s(bound, n)
        assert plain.allreduce_s(bound, n) == plain.allreduce_latency(n) + bound * plain.allreduce_s_per_byte(n)
    nccl_only = dataclasses.replace(plain, engine_allreduce=())
    below = nccl_only.numbers(8).allreduce_curve.seconds(8192, nccl_only.allreduce_s_per_byte(8), 1e-5)
    assert nccl_only.allreduce_s(8192, 8) == below and 30e-6 < below < 32e-6 and below > plain.allreduce_s(8192, 8)
    pcie = dataclasses.replace(trt, link="pcie4")
    assert pcie.allreduce_s(8192, 8) == below


def _a100_with(section: dict):
    """The shipped a100-80gb calibration with this interconnect section instead of its own."""
    return dataclasses.replace(load_calibration("a100-80gb"), interconnect=interconnect_from_dict(section, file="x.yaml"))


def _a100_with_curve():
    return _a100_with(SECTION)


def test_a_tp8_step_pays_the_curve_exactly_where_the_engine_sends_its_all_reduces_to_nccl() -> None:
    """TP 8, TensorRT-LLM: a 256-sequence decode step's 4 MiB all-reduces run NCCL and take the curve
    (step time up by exactly (2 layers + 1) x (curve - form)); a batch-1 step's 16 KiB ones stay on
    the one-shot form; under ``eager`` (no engine choice) neither moves."""
    model = load_model("llama-3-70b")
    cal, plain_cal = _a100_with_curve(), _a100_with(TOP)
    trt = PROFILES["trtllm"]
    count, ic = 2 * model.num_layers + 1, with_profile_allreduce(cal, trt).interconnect
    for n, moves in ((256, True), (1, False)):
        shape = BatchShape.decode(n, 1000 * n)
        with_curve = build_profiled_cost(model, cal, trt, max_num_seqs=256, tensor_parallel_size=8)
        without = build_profiled_cost(model, plain_cal, trt, max_num_seqs=256, tensor_parallel_size=8)
        delta = with_curve.step_time_s(shape) - without.step_time_s(shape)
        nbytes = n * model.hidden_size * 2
        linear = ic.allreduce_latency(8) + nbytes * ic.allreduce_s_per_byte(8)
        curve = ic.nccl_curve(8)[0].seconds(nbytes, ic.allreduce_s_per_byte(8), ic.allreduce_latency(8))
        expected = count * (curve - linear) if moves else 0.0
        assert delta == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert (delta > 0) == moves
        eager = PROFILES["eager"]
        assert (build_profiled_cost(model, cal, eager, max_num_seqs=256, tensor_parallel_size=8).step_time_s(shape)
                == build_cost_model(model, plain_cal, tensor_parallel_size=8).step_time_s(shape))


def test_turning_the_custom_all_reduce_off_sends_a_small_message_to_nccl() -> None:
    """vLLM's --disable-custom-all-reduce (profile_overrides custom_allreduce_max_bytes: 0): a batch-1
    step's all-reduces take the curve below its first point, not the one-shot form."""
    model, cal = load_model("llama-3-70b"), _a100_with_curve()
    shape = BatchShape.decode(1, 1000)
    on = PROFILES["vllm-v1"]
    off = on.with_overrides({"custom_allreduce_max_bytes": 0})
    assert off.custom_allreduce_bytes == () and on.custom_allreduce_bytes == ((8, 8 * 2 ** 20),)
    assert on.with_overrides({"custom_allreduce_max_bytes": 1e6}).custom_allreduce_bytes == ((8, 1e6),)
    t_on = build_profiled_cost(model, cal, on, max_num_seqs=8, tensor_parallel_size=8).step_time_s(shape)
    t_off = build_profiled_cost(model, cal, off, max_num_seqs=8, tensor_parallel_size=8).step_time_s(shape)
    ic, nbytes = cal.interconnect, model.hidden_size * 2
    one_shot = ic.allreduce_latency(8) + nbytes * ic.allreduce_s_per_byte(8)
    below = ic.numbers(8).allreduce_curve.seconds(nbytes, ic.allreduce_s_per_byte(8), ic.allreduce_latency(8))
    assert 30e-6 < below < 32e-6  # the first two points' line, a little under the curve's first point
    assert t_off - t_on == pytest.approx((2 * model.num_layers + 1) * (below - one_shot), rel=1e-9)


def test_a_bad_curve_in_a_calibration_file_is_exit_2_and_one_line(tmp_path, capsys) -> None:
    data = yaml.safe_load(calibration_file("a100-80gb").read_text())
    data["interconnect"]["by_num_gpus"] = {8: {"allreduce_curve": [[1048576, 8e-5], [262144, 4e-5]]}}
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(data))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"model": "tiny-llama", "gpu": str(path), "engine": {"tensor_parallel_size": 2},
                                        "workload": {"num_requests": 2, "arrival": {"type": "constant", "rate": 10.0},
                                                     "prompt_tokens": {"type": "fixed", "value": 20},
                                                     "output_tokens": {"type": "fixed", "value": 5}}}))
    assert main(["run", str(scenario), "--no-report"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "cal.yaml" in lines[0] and "allreduce_curve[1]" in lines[0]
    assert "strictly increasing" in lines[0]


def test_the_override_is_checked_in_a_scenario_and_in_a_calibrations_profiles(tmp_path, capsys) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"model": "tiny-llama", "gpu": "a100-80gb",
                                        "engine": {"profile_overrides": {"custom_allreduce_max_bytes": -1}},
                                        "workload": {"num_requests": 2, "arrival": {"type": "constant", "rate": 10.0},
                                                     "prompt_tokens": {"type": "fixed", "value": 20},
                                                     "output_tokens": {"type": "fixed", "value": 5}}}))
    assert main(["run", str(scenario), "--no-report"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "engine.profile_overrides.custom_allreduce_max_bytes" in lines[0]
    cal = dataclasses.replace(load_calibration("a100-80gb"), profiles={"trtllm": {"custom_allreduce_max_bytes": "big"}})
    with pytest.raises(ConfigError) as err:
        with_calibration(PROFILES["trtllm"], cal)
    assert err.value.key == "profiles.trtllm.custom_allreduce_max_bytes" and "bytes from 0 to 1e12" in str(err.value)
    measured = with_calibration(PROFILES["trtllm"], dataclasses.replace(
        cal, profiles={"trtllm": {"custom_allreduce_max_bytes": 0}}))
    assert measured.custom_allreduce_bytes == ()

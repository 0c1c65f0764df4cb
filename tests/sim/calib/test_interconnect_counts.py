"""The interconnect section's ``by_num_gpus``: numbers of one GPU count, read, written, checked,
used at that count only (other counts take the top level), and in the tensor-parallel and
pipeline cost models."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sim.calib.calibration import calibration_file, calibration_from_dict, calibration_to_dict, load_calibration
from sim.calib.interconnect import CountNumbers, Interconnect, interconnect_from_dict, interconnect_to_dict
from sim.cost.build import build_cost_model
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model

TOP = {"allreduce_bus_bandwidth_bytes_per_s": 4.0e11, "allreduce_latency_s": 2e-5,
       "p2p_bandwidth_bytes_per_s": 3.6e11, "p2p_latency_s": 8e-6, "link": "nvlink4"}
TWO = {"allreduce_bus_bandwidth_bytes_per_s": 2.5e11, "allreduce_latency_s": 5e-6,
       "allgather_bus_bandwidth_bytes_per_s": 2.0e11, "allgather_latency_s": 4e-6}
SECTION = TOP | {"by_num_gpus": {2: TWO, 8: {"allgather_latency_s": 3e-5}}}


def _h100_dict() -> dict:
    return yaml.safe_load(calibration_file("h100-sxm").read_text())


def test_by_num_gpus_round_trips_through_a_calibration_yaml_in_both_schemas() -> None:
    for schema in (1, 2):
        cal = calibration_from_dict(_h100_dict() | {"schema": schema, "interconnect": SECTION}, file="x.yaml")
        ic = cal.interconnect
        assert ic.by_num_gpus == ((2, CountNumbers(2.5e11, 5e-6, 2.0e11, 4e-6)),
                                  (8, CountNumbers(allgather_latency_s=3e-5)))
        text = yaml.safe_dump(calibration_to_dict(cal))
        again = calibration_from_dict(yaml.safe_load(text), file="y.yaml")
        assert again.interconnect == ic
        assert interconnect_to_dict(ic)["interconnect"]["by_num_gpus"] == {2: TWO, 8: {"allgather_latency_s": 3e-5}}


def test_string_counts_as_json_writes_them_are_read() -> None:
    ic = interconnect_from_dict(TOP | {"by_num_gpus": {"2": {"allreduce_latency_s": "1e-6"}}}, file="x.json")
    assert ic.by_num_gpus == ((2, CountNumbers(allreduce_latency_s=1e-6)),)


def test_a_count_with_its_own_numbers_uses_them_and_the_others_fall_back() -> None:
    ic = interconnect_from_dict(SECTION, file="x.yaml")
    nbytes = 1 << 24
    # two GPUs: every number from by_num_gpus[2]
    assert ic.allreduce_s(nbytes, 2) == pytest.approx(5e-6 + 2 * 1 / 2 * nbytes / 2.5e11)
    assert ic.allgather_s(nbytes, 2) == pytest.approx(4e-6 + 1 / 2 * nbytes / 2.0e11)
    # four GPUs: no entry, the top-level all-reduce numbers for both collectives (as without by_num_gpus)
    plain = Interconnect(4.0e11, 2e-5, "nvlink4")
    assert ic.allreduce_s(nbytes, 4) == pytest.approx(2e-5 + 2 * 3 / 4 * nbytes / 4.0e11)
    assert ic.allreduce_s(nbytes, 4) == plain.allreduce_s(nbytes, 4)
    assert ic.allgather_s(nbytes, 4) == plain.allgather_s(nbytes, 4)
    # eight GPUs: its own all-gather latency, every other number from the top level
    assert ic.allgather_s(nbytes, 8) == pytest.approx(3e-5 + 7 / 8 * nbytes / 4.0e11)
    assert ic.allreduce_s(nbytes, 8) == plain.allreduce_s(nbytes, 8)
    assert ic.allreduce_s(nbytes, 1) == 0.0 and ic.allgather_s(nbytes, 1) == 0.0


@pytest.mark.parametrize(("by", "key"), [
    ([1, 2], "interconnect.by_num_gpus"),
    ({1: TWO}, "interconnect.by_num_gpus.1"),
    ({"two": TWO}, "interconnect.by_num_gpus.two"),
    ({True: TWO}, "interconnect.by_num_gpus.True"),
    ({2.5: TWO}, "interconnect.by_num_gpus.2.5"),
    ({2: TWO, "2": TWO}, "interconnect.by_num_gpus.2"),
    ({4: [1e11]}, "interconnect.by_num_gpus.4"),
    ({4: {"p2p_latency_s": 1e-6}}, "interconnect.by_num_gpus.4.p2p_latency_s"),
    ({4: {"allgather_bus_bandwidth_bytes_per_s": 0}}, "interconnect.by_num_gpus.4.allgather_bus_bandwidth_bytes_per_s"),
    ({4: {"allreduce_latency_s": -1e-6}}, "interconnect.by_num_gpus.4.allreduce_latency_s"),
    ({8: {"allgather_latency_s": float("nan")}}, "interconnect.by_num_gpus.8.allgather_latency_s"),
    ({8: {"allreduce_bus_bandwidth_bytes_per_s": "fast"}}, "interconnect.by_num_gpus.8.allreduce_bus_bandwidth_bytes_per_s"),
])
def test_bad_entries_are_one_error_naming_the_file_and_key(by, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        calibration_from_dict(_h100_dict() | {"interconnect": TOP | {"by_num_gpus": by}}, file="bad.yaml")
    assert err.value.file == "bad.yaml" and err.value.key == key and "\n" not in str(err.value)


def _with_section(section: dict):
    return dataclasses.replace(load_calibration("h100-sxm"),
                               interconnect=interconnect_from_dict(section, file="x.yaml"))


def test_tensor_parallel_step_time_takes_the_counts_own_collectives() -> None:
    """A TP=2 step's collectives move from the top-level numbers to by_num_gpus[2]'s by exactly
    the difference of (2 layers + 1) all-reduces and one all-gather; TP=4 (no entry) is unchanged."""
    model = load_model("llama-3-8b")
    top, per = _with_section(TOP), _with_section(SECTION)
    shape, act = BatchShape.decode(32, 2000), 2
    for tp, changed in ((2, True), (4, False)):
        t_top = build_cost_model(model, top, tensor_parallel_size=tp).step_time_s(shape)
        t_per = build_cost_model(model, per, tensor_parallel_size=tp).step_time_s(shape)
        reduce_bytes, gather_bytes = 32 * model.hidden_size * act, 32 * model.vocab_size * act
        a, b = top.interconnect, per.interconnect
        expected = ((2 * model.num_layers + 1) * (b.allreduce_s(reduce_bytes, tp) - a.allreduce_s(reduce_bytes, tp))
                    + b.allgather_s(gather_bytes, tp) - a.allgather_s(gather_bytes, tp))
        assert (t_per - t_top != 0) == changed
        assert t_per - t_top == pytest.approx(expected, rel=1e-6, abs=1e-12)

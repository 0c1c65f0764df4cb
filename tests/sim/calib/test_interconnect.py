"""The calibration's ``interconnect:`` section: reading, checking, writing, the shipped numbers."""

from __future__ import annotations

import copy

import pytest
import yaml

from sim.calib.calibration import (
    available_calibrations, calibration_file, calibration_from_dict, calibration_to_dict, load_calibration)
from sim.calib.interconnect import Interconnect, interconnect_from_dict
from sim.errors import ConfigError

SECTION = {"allreduce_bus_bandwidth_bytes_per_s": 4.0e11, "allreduce_latency_s": 8e-6,
           "p2p_bandwidth_bytes_per_s": 3.6e11, "p2p_latency_s": 8e-6, "link": "nvlink4", "source": "test"}


def _h100_dict() -> dict:
    return yaml.safe_load(calibration_file("h100-sxm").read_text())


def test_section_round_trips_in_both_schemas() -> None:
    for schema in (1, 2):
        data = _h100_dict() | {"schema": schema, "interconnect": dict(SECTION)}
        cal = calibration_from_dict(data, file="x.yaml")
        assert cal.interconnect == Interconnect(4.0e11, 8e-6, "nvlink4", 3.6e11, 8e-6, "test")
        again = calibration_from_dict(calibration_to_dict(cal), file="y.yaml")
        assert again.interconnect == cal.interconnect


def test_section_is_optional() -> None:
    data = _h100_dict()
    data.pop("interconnect")
    cal = calibration_from_dict(data, file="x.yaml")
    assert cal.interconnect is None and "interconnect" not in calibration_to_dict(cal)


def test_p2p_and_source_are_optional_and_1e12_strings_are_numbers() -> None:
    ic = interconnect_from_dict({"allreduce_bus_bandwidth_bytes_per_s": "2e10", "allreduce_latency_s": 0,
                                 "link": "pcie4"}, file="x.yaml")
    assert ic.allreduce_bus_bandwidth_bytes_per_s == 2e10 and ic.p2p_bandwidth_bytes_per_s is None


@pytest.mark.parametrize(("change", "key"), [
    ({"link": "ethernet"}, "interconnect.link"),
    ({"allreduce_bus_bandwidth_bytes_per_s": 0}, "interconnect.allreduce_bus_bandwidth_bytes_per_s"),
    ({"allreduce_bus_bandwidth_bytes_per_s": float("inf")}, "interconnect.allreduce_bus_bandwidth_bytes_per_s"),
    ({"allreduce_latency_s": -1e-6}, "interconnect.allreduce_latency_s"),
    ({"allreduce_latency_s": True}, "interconnect.allreduce_latency_s"),
    ({"p2p_latency_s": 5.0}, "interconnect.p2p_latency_s"),
    ({"source": ""}, "interconnect.source"),
    ({"nvlink_gen": 4}, "interconnect.nvlink_gen"),
])
def test_bad_values_are_one_error_naming_the_key(change: dict, key: str) -> None:
    data = _h100_dict() | {"interconnect": dict(SECTION) | change}
    with pytest.raises(ConfigError) as err:
        calibration_from_dict(data, file="bad.yaml")
    assert err.value.file == "bad.yaml" and err.value.key == key and "\n" not in str(err.value)


def test_missing_required_key_and_not_a_mapping() -> None:
    section = copy.deepcopy(SECTION)
    section.pop("allreduce_latency_s")
    with pytest.raises(ConfigError, match="required key missing"):
        calibration_from_dict(_h100_dict() | {"interconnect": section}, file="bad.yaml")
    with pytest.raises(ConfigError) as err:
        calibration_from_dict(_h100_dict() | {"interconnect": [1, 2]}, file="bad.yaml")
    assert err.value.key == "interconnect"


def test_ring_all_reduce_and_all_gather() -> None:
    ic = Interconnect(1e11, 1e-5, "nvlink4")
    assert ic.allreduce_s(1e9, 1) == 0.0 and ic.allgather_s(1e9, 1) == 0.0
    assert ic.allreduce_s(1e9, 4) == pytest.approx(1e-5 + 2 * 3 / 4 * 1e9 / 1e11)
    assert ic.allgather_s(1e9, 8) == pytest.approx(1e-5 + 7 / 8 * 1e9 / 1e11)


EXPECTED_LINKS = {"a100-40gb": "nvlink3", "a100-80gb": "nvlink3", "a100-vidur-linear": "nvlink3",
                  "h100-sxm": "nvlink4", "h200": "nvlink4", "l40s": "pcie4", "rtx-4090": "pcie4",
                  "rtx-4060-8gb": "pcie4", "a10": "pcie4", "a10g": "pcie4", "b200": "nvlink5",
                  "h100-nvl": "pcie5", "h100-pcie": "pcie5", "h20": "nvlink4", "l4": "pcie4", "l40": "pcie4",
                  "mi300x": "xgmi", "rtx-3090": "pcie4", "rtx-a6000": "pcie4", "t4": "pcie3",
                  "v100-sxm2-32gb": "nvlink2"}


@pytest.mark.parametrize("name", sorted(EXPECTED_LINKS))
def test_shipped_gpus_have_a_cited_interconnect(name: str) -> None:
    cal = load_calibration(name)
    ic = cal.interconnect
    assert ic is not None and ic.link == EXPECTED_LINKS[name]
    assert "interconnect" in cal.provenance
    if name in ("h100-sxm", "h200"):  # NVLink4: 450 GB/s per direction; NCCL busbw below it
        assert "900 GB/s" in cal.provenance["interconnect"]
        assert 3.6e11 <= ic.allreduce_bus_bandwidth_bytes_per_s <= 4.8e11
    if name.startswith("a100-") and name != "a100-vidur-linear":
        assert "600 GB/s" in cal.provenance["interconnect"]
        assert 2.0e11 <= ic.allreduce_bus_bandwidth_bytes_per_s <= 3.0e11
    if ic.link == "pcie3":
        assert ic.allreduce_bus_bandwidth_bytes_per_s <= 1.6e10  # Gen3 x16
    if ic.link == "pcie4":
        assert ic.allreduce_bus_bandwidth_bytes_per_s <= 3.2e10  # at most PCIe Gen4 x16 per direction
    if ic.link == "pcie5":
        assert ic.allreduce_bus_bandwidth_bytes_per_s <= 6.4e10  # Gen5 x16


def test_pair_links_and_meshes_depend_on_the_gpu_count() -> None:
    """An H100 NVL pair shares an NVLink bridge (TP 2) and crosses PCIe beyond it; an MI300X ring
    over n GPUs uses n - 1 Infinity Fabric links of a fully connected node."""
    nvl = load_calibration("h100-nvl").interconnect
    size = 64 << 20
    assert nvl.allreduce_s(size, 2) * 4 < nvl.allreduce_s(size, 4)
    mi = load_calibration("mi300x").interconnect
    times = [mi.allreduce_s(size, n) for n in (2, 4, 8)]
    assert times[0] > times[1] > times[2]
    assert mi.link == "xgmi" and "Infinity Fabric" in load_calibration("mi300x").provenance["interconnect"]


def test_an_eight_gpu_l40s_ring_is_slower_per_byte_than_four() -> None:
    """On one 8x L40S PCIe server NCCL measures about 14.4 GB/s all-reduce busbw at 8 GPUs and about
    21.7 at 4 (the calibration's provenance cites it): a TP-8 ring pays its own, lower bandwidth."""
    cal = load_calibration("l40s")
    ic, size = cal.interconnect, 64 << 20
    busbw = {n: ic.numbers(n).allreduce_bus_bandwidth_bytes_per_s for n in (2, 4, 8)}
    assert busbw[2] == busbw[4] == ic.allreduce_bus_bandwidth_bytes_per_s
    assert 1.3e10 <= busbw[8] <= 1.6e10 < busbw[4]
    assert ic.allreduce_s(size, 8) == pytest.approx(ic.allreduce_latency(8) + 2 * 7 / 8 * size / busbw[8])
    assert "sm_budget_results.md" in cal.provenance["interconnect"]


def test_the_cpu_calibration_has_no_interconnect() -> None:
    assert "cpu-epyc-2core" in available_calibrations()
    assert load_calibration("cpu-epyc-2core").interconnect is None

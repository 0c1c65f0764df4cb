"""Calibration precision sections: per-mode compute peaks and weight-only dequantisation."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration
from sim.calib.precision import COMPUTE_MODES, gemm_precision
from sim.errors import ConfigError

REPO_CALIBRATIONS = Path(__file__).resolve().parents[3] / "calibrations"
DATASHEETS = ["a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s", "rtx-4090", "rtx-4060-8gb"]


def _data(**changes) -> dict:
    data = yaml.safe_load((REPO_CALIBRATIONS / "h100-sxm.yaml").read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


@pytest.mark.parametrize("name", DATASHEETS)
def test_shipped_datasheets_have_peaks_and_dequant(name: str) -> None:
    cal = load_calibration(name)
    p = cal.precision
    assert p is not None and p.compute_peaks["bf16"] == cal.peak_flops
    assert set(p.compute_peaks) <= set(COMPUTE_MODES) and {"bf16", "fp16", "fp16-acc16", "int8"} <= set(p.compute_peaks)
    assert all(0 < v <= 1 for v in p.dequant.values()) and set(p.dequant) == {"int8", "int4", "fp8", "fp4"}
    assert ("fp4" in p.compute_peaks) == (name == "b200")  # Blackwell's tensor cores only
    assert p.dequant_source and "compute_peaks" in cal.provenance
    assert p.compute_peaks["int8"] >= 2 * cal.peak_flops * 0.999  # int8 tensor cores: twice bf16 or more


def test_datasheet_numbers() -> None:
    peaks = {n: load_calibration(n).precision.compute_peaks for n in DATASHEETS}
    assert peaks["h100-sxm"] == peaks["h200"] == {"bf16": 989e12, "fp16": 989e12, "fp16-acc16": 989e12,
                                                  "fp8": 1979e12, "int8": 1979e12}
    assert "fp8" not in peaks["a100-80gb"] and peaks["a100-80gb"]["int8"] == 624e12  # Ampere: no fp8
    assert peaks["rtx-4090"] == {"bf16": 165.2e12, "fp16": 165.2e12, "fp16-acc16": 330.3e12,
                                 "fp8": 330.3e12, "int8": 660.6e12}
    assert peaks["l40s"]["fp8"] == 733e12 and peaks["l40s"]["fp16-acc16"] == 362e12
    r = peaks["rtx-4060-8gb"]  # GeForce: fp16 accumulate and fp8 twice fp32-accumulate fp16
    assert r["fp16-acc16"] == r["fp8"] == pytest.approx(2 * r["bf16"], rel=1e-3)


@pytest.mark.parametrize("name", DATASHEETS)
def test_round_trip(name: str) -> None:
    cal = load_calibration(name)
    back = calibration_from_dict(calibration_to_dict(cal), file="x.yaml")
    assert back.precision.compute_peaks == cal.precision.compute_peaks
    assert back.precision.dequant == cal.precision.dequant
    assert back.precision.dequant_source == cal.precision.dequant_source


def test_round_trip_of_a_dequant_only_file() -> None:
    cal = calibration_from_dict(_data(compute_peaks=None, dequant={"int4": 0.9}), file="x.yaml")
    out = calibration_to_dict(cal)
    assert "compute_peaks" not in out and out["dequant"] == {"int4": 0.9}
    assert calibration_from_dict(out, file="x.yaml").precision == cal.precision


def test_without_the_new_keys_there_is_no_precision() -> None:
    cal = calibration_from_dict(_data(compute_peaks=None, dequant=None, mode_efficiency=None), file="x.yaml")
    assert cal.precision is None and "compute_peaks" not in calibration_to_dict(cal)
    # the legacy charge: every mode at peak_flops, activations in the weight dtype, no dequant
    for mode in (None, *COMPUTE_MODES):
        gp = gemm_precision(cal, "int4", 0.5, mode)
        assert (gp.peak_flops, gp.weight_read_efficiency, gp.act_bytes) == (cal.peak_flops, 1.0, 0.5)


@pytest.mark.parametrize("changes, key, words", [
    ({"compute_peaks": [1, 2]}, "compute_peaks", "mapping"),
    ({"compute_peaks": {}}, "compute_peaks", "mapping"),
    ({"compute_peaks": {"fp6": 1e15}}, "compute_peaks.fp6", "unknown key; allowed: bf16, fp16, fp16-acc16"),
    ({"compute_peaks": {"fp8": -1}}, "compute_peaks.fp8", "outside the allowed range 1e+06 to 1e+18"),
    ({"compute_peaks": {"fp8": 1e19}}, "compute_peaks.fp8", "outside the allowed range"),
    ({"compute_peaks": {"fp8": "fast"}}, "compute_peaks.fp8", "expected a number"),
    ({"compute_peaks": {"fp8": float("nan")}}, "compute_peaks.fp8", "expected a number"),
    ({"compute_peaks": {"fp8": True}}, "compute_peaks.fp8", "expected a number"),
    ({"compute_peaks": {"bf16": 1e15}}, "compute_peaks.bf16", "must equal peak_flops"),
    ({"dequant": 0.9}, "dequant", "mapping"),
    ({"dequant": {"int8": 0}}, "dequant.int8", "must be in (0, 1]"),
    ({"dequant": {"int4": 1.5}}, "dequant.int4", "must be in (0, 1]"),
    ({"dequant": {"int2": 0.5}}, "dequant.int2", "unknown key; allowed: int8, int4, fp8, fp4, source"),
    ({"dequant": {"int8": 0.9, "source": ""}}, "dequant.source", "non-empty string"),
])
def test_bad_values_are_one_line_errors(changes: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        calibration_from_dict(_data(**changes), file="cal.yaml")
    assert err.value.file == "cal.yaml" and err.value.key == key and words in err.value.message
    assert "\n" not in str(err.value)


def test_a_measured_calibration_keeps_its_datasheet_peaks_as_ratios() -> None:
    # a measured calibration's peak_flops is its fitted GEMM throughput, not the datasheet's bf16 peak
    data = _data(source="measured", peak_flops=7e14, compute_peaks={"bf16": 989e12, "fp8": 1979e12},
                 mode_efficiency=None)
    cal = calibration_from_dict(data, file="m.yaml")
    assert cal.precision.speedup("fp8") == pytest.approx(2.001, rel=1e-3)
    assert gemm_precision(cal, "fp8", 1, None).peak_flops == pytest.approx(7e14 * 1979 / 989)
    assert gemm_precision(cal, "bf16", 2, None).peak_flops == 7e14


def test_scientific_strings_are_numbers() -> None:
    cal = calibration_from_dict(_data(compute_peaks={"fp8": "1979e12", "bf16": "989e12"}), file="x.yaml")
    assert cal.precision.compute_peaks == {"bf16": 989e12, "fp8": 1979e12}


def test_a_missing_mode_is_an_error_only_when_asked() -> None:
    a100 = load_calibration("a100-80gb")
    assert gemm_precision(a100, "bf16", 2, None).compute == "bf16"  # not asked: fine
    with pytest.raises(ConfigError) as err:
        gemm_precision(a100, "fp8", 1, "fp8")
    e = err.value
    assert e.file.endswith("a100-80gb.yaml") and e.key == "compute_peaks.fp8"
    assert "bf16, fp16, fp16-acc16, int8" in e.message and "\n" not in str(e)


def test_a_missing_dequant_dtype_is_an_error_only_when_asked() -> None:
    cal = calibration_from_dict(_data(dequant={"int4": 0.9}), file="cal.yaml")
    assert gemm_precision(cal, "int4", 0.5, None).weight_read_efficiency == 0.9
    assert gemm_precision(cal, "int8", 1, "int8").weight_read_efficiency == 1.0  # W8A8: no dequant
    with pytest.raises(ConfigError) as err:
        gemm_precision(cal, "int8", 1, None)
    assert (err.value.file, err.value.key) == ("cal.yaml", "dequant.int8") and "int4" in err.value.message
    no_section = dataclasses.replace(cal, precision=dataclasses.replace(cal.precision, dequant=None))
    assert gemm_precision(no_section, "int8", 1, None).weight_read_efficiency == 1.0


@pytest.mark.parametrize("gpu, weights, nbytes, compute, expected, weight_only", [
    ("h100-sxm", "bf16", 2, None, "bf16", False),
    ("h100-sxm", "fp16", 2, None, "fp16", False),
    ("h100-sxm", "fp8", 1, None, "fp8", False),  # W8A8-FP8
    ("a100-80gb", "fp8", 1, None, "bf16", True),  # no fp8 tensor cores: fp8 Marlin, weight-only
    ("h100-sxm", "int8", 1, None, "bf16", True),  # W8A16
    ("h100-sxm", "int4", 0.5, None, "bf16", True),  # W4A16
    ("h100-sxm", "int8", 1, "int8", "int8", False),  # W8A8 int8 (SmoothQuant)
    ("rtx-4090", "int4", 0.5, "fp16-acc16", "fp16-acc16", True),
    ("h100-sxm", "fp8", 1, "bf16", "bf16", True),
    ("b200", "fp4", 0.5625, None, "fp4", False),  # W4A4 NVFP4 on Blackwell
    ("h100-sxm", "fp4", 0.5625, None, "bf16", True),  # no fp4 tensor cores: fp4 Marlin, weight-only
    ("b200", "fp8", 1, None, "fp8", False),
])
def test_compute_dtype_follows_the_weights(gpu, weights, nbytes, compute, expected, weight_only) -> None:
    cal = load_calibration(gpu)
    gp = gemm_precision(cal, weights, nbytes, compute)
    assert (gp.compute, gp.weight_only) == (expected, weight_only)
    eff = (cal.precision.mode_efficiency or {}).get(expected, 1.0)  # fp8 on H100: below its datasheet peak
    assert gp.peak_flops == pytest.approx(cal.precision.compute_peaks[expected] * eff, rel=1e-12)
    assert gp.act_bytes == 2
    assert gp.weight_read_efficiency == (cal.precision.dequant[weights] if weight_only else 1.0)

"""``mode_efficiency``: the share of the bf16 GEMMs' achieved efficiency a math mode's GEMMs reach
of their own peak (sim/calib/precision.py), in the calibrations and in both cost models."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration
from sim.calib.precision import EFFICIENCY_MODES
from sim.cost.build import build_cost_model
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model

CALIBRATIONS = Path(__file__).resolve().parents[3] / "calibrations"
FP8_GPUS = ["h100-sxm", "h200", "l40s"]


def _data(**changes) -> dict:
    data = yaml.safe_load((CALIBRATIONS / "h100-sxm.yaml").read_text())
    data.update(changes)
    return data


def _without(cal):
    """``cal`` with no mode_efficiency section (every mode at its datasheet peak ratio)."""
    return dataclasses.replace(cal, precision=dataclasses.replace(cal.precision, mode_efficiency=None))


@pytest.mark.parametrize("name", FP8_GPUS)
def test_shipped_fp8_gpus_carry_a_sourced_fraction(name: str) -> None:
    p = load_calibration(name).precision
    assert p.mode_efficiency is not None and 0 < p.mode_efficiency["fp8"] < 1
    assert p.mode_efficiency_source and "bench_fp8_gemm" in p.mode_efficiency_source
    ratio = p.compute_peaks["fp8"] / p.compute_peaks["bf16"]
    assert p.speedup("fp8") == pytest.approx(ratio * p.mode_efficiency["fp8"])
    assert p.speedup("bf16") == 1.0  # the reference mode is never scaled
    assert p.speedup("int8") == pytest.approx(p.compute_peaks["int8"] / p.compute_peaks["bf16"])  # not listed: 1


@pytest.mark.parametrize("name", ["a100-80gb", "rtx-4090"])
def test_gpus_without_the_section_keep_the_peak_ratio(name: str) -> None:
    p = load_calibration(name).precision
    assert p.mode_efficiency is None
    for mode in p.compute_peaks:
        assert p.speedup(mode) == p.compute_peaks[mode] / p.compute_peaks["bf16"]


def test_round_trip() -> None:
    cal = load_calibration("h100-sxm")
    back = calibration_from_dict(calibration_to_dict(cal), file="x.yaml")
    assert back.precision.mode_efficiency == cal.precision.mode_efficiency
    assert back.precision.mode_efficiency_source == cal.precision.mode_efficiency_source


def test_a_section_alone_makes_a_precision() -> None:
    data = _data(mode_efficiency={"fp8": 0.5})
    for key in ("compute_peaks", "dequant"):
        data.pop(key)
    p = calibration_from_dict(data, file="x.yaml").precision
    assert p is not None and p.mode_efficiency == {"fp8": 0.5} and not p.has_compute_peaks


@pytest.mark.parametrize("section, key, words", [
    ({"fp8": 0.0}, "mode_efficiency.fp8", "(0, 1]"),
    ({"fp8": 1.2}, "mode_efficiency.fp8", "(0, 1]"),
    ({"fp8": "fast"}, "mode_efficiency.fp8", "expected a number"),
    ({"bf16": 0.9}, "mode_efficiency.bf16", "unknown key"),
    ({"fp6": 0.9}, "mode_efficiency.fp6", "unknown key"),
    ({"fp8": 0.9, "source": ""}, "mode_efficiency.source", "non-empty string"),
    ({}, "mode_efficiency", "non-empty mapping"),
    ([0.9], "mode_efficiency", "non-empty mapping"),
])
def test_bad_values_are_one_line_errors(section, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        calibration_from_dict(_data(mode_efficiency=section), file="bad.yaml")
    assert err.value.key == key and words in str(err.value) and "bad.yaml" in str(err.value)
    assert set(EFFICIENCY_MODES) == {"fp16", "fp16-acc16", "fp8", "int8", "fp4"}


@pytest.mark.parametrize("gpu", FP8_GPUS)
def test_compute_bound_fp8_steps_slow_down_by_the_fraction_and_bf16_is_untouched(gpu: str) -> None:
    model = load_model("llama-3-8b")
    cal = load_calibration(gpu)
    eff = cal.precision.mode_efficiency["fp8"]
    prefill = BatchShape.prefill(8192)  # one 8192-token prompt: compute-bound GEMMs
    decode = BatchShape(1, 0, 1, 512, 0.0, 0, 0)  # batch-1 decode: weight reads dominate

    def step(c, weights, shape):
        nbytes = 1 if weights == "fp8" else 2
        return build_cost_model(model, c, "bf16", nbytes, weight_dtype=weights).step_time_s(shape)

    assert step(cal, "bf16", prefill) == step(_without(cal), "bf16", prefill)
    slow, fast = step(cal, "fp8", prefill), step(_without(cal), "fp8", prefill)
    assert fast < slow < fast / eff  # only the GEMMs' compute share slows down, by at most 1 / eff
    # batch-1 decode is bound by its weight reads: the math's share (smooth roofline) barely moves it
    decode_change = step(cal, "fp8", decode) / step(_without(cal), "fp8", decode) - 1
    assert 0 <= decode_change < 0.01 < slow / fast - 1

"""An engine profile's own weight-only kernels (EngineProfile.weight_only_kernels): the
``compiled`` profile's tinygemm int4 replaces the calibration's dequant.int4 (Marlin)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.base import decode_step_time_s
from sim.cost.build import build_profiled_cost, with_profile_kernels
from sim.cost.profile import PROFILES, ProfileName
from sim.model.hf_config import load_model

DTYPE_BYTES = {"bf16": 2, "int8": 1, "int4": 0.5}


def batch1_decode_s(profile: str, weights: str, gpu: str = "a100-80gb", cal=None) -> float:
    cal = cal or load_calibration(gpu)
    cm = build_profiled_cost(load_model("llama-2-7b"), cal, PROFILES[profile], max_num_seqs=1,
                             kv_dtype="bf16", weight_dtype_bytes=DTYPE_BYTES[weights], weight_dtype=weights)
    return decode_step_time_s(cm, batch_size=1, context_tokens=100)


def test_compiled_profile_declares_a_slower_int4_kernel_than_the_calibration() -> None:
    cal = load_calibration("a100-80gb")
    kernels = dict(PROFILES[ProfileName.COMPILED].weight_only_kernels)
    assert 0 < kernels["int4"] < cal.precision.dequant["int4"]
    swapped = with_profile_kernels(cal, PROFILES[ProfileName.COMPILED])
    assert swapped.precision.dequant["int4"] == kernels["int4"]
    assert swapped.precision.dequant["int8"] == cal.precision.dequant["int8"]  # only the profile's dtypes
    assert cal.precision.dequant["int4"] != kernels["int4"]  # the loaded calibration is untouched


def test_profiles_without_kernels_keep_the_calibration() -> None:
    cal = load_calibration("h100-sxm")
    for name in (ProfileName.VLLM_V1, ProfileName.EAGER, ProfileName.TRTLLM):
        assert with_profile_kernels(cal, PROFILES[name]) is cal
    legacy = dataclasses.replace(cal, precision=None)  # no precision sections: the legacy charge stays
    assert with_profile_kernels(legacy, PROFILES[ProfileName.COMPILED]) is legacy


def test_int4_decode_under_compiled_pays_the_kernel_not_just_the_bytes() -> None:
    # batch-1 decode is weight-bound: the int4 weights' time scales by dequant ratio under the
    # compiled profile, so int4 gains much less over bf16 there than under a Marlin engine
    compiled_gain = batch1_decode_s("compiled", "bf16") / batch1_decode_s("compiled", "int4")
    marlin = dataclasses.replace(PROFILES[ProfileName.COMPILED], weight_only_kernels=())
    PROFILES["_marlin_test"] = marlin
    try:
        marlin_gain = batch1_decode_s("_marlin_test", "bf16") / batch1_decode_s("_marlin_test", "int4")
        marlin_int8 = batch1_decode_s("_marlin_test", "int8")
    finally:
        del PROFILES["_marlin_test"]
    assert 1.5 < compiled_gain < 2.3 < marlin_gain  # torchao's A100/H100 tables: int4 ~1.9x bf16
    assert batch1_decode_s("compiled", "int8") == pytest.approx(marlin_int8)  # int8 keeps the calibration's

"""The GEMM tile/wave term: exact on hand-computed shapes, monotone, validated, and off (the
old predictions, bit for bit) in calibrations without its parameters."""

from __future__ import annotations

import copy
import itertools
import math
from pathlib import Path

import pytest

from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration
from sim.calib.gemm_tiles import REGIME_PARAMS, num_tiles, num_waves, regime, wave_efficiency, work_scale
from sim.calib.kernel_models import KernelFit, features, kernel_fit_from_dict, roofline_s
from sim.errors import ConfigError

CALIBRATIONS = Path(__file__).resolve().parents[3] / "calibrations"
BASE = {"bandwidth_bytes_per_s": 2e12, "flops_per_s": 2.5e14, "x_half": 0.0, "overhead_s": 4e-6,
        "item_s": 0.0, "sharpness": 2.0}
TILED = {**BASE, "sm_count": 108.0, "tile_m": 64.0, "tile_n": 128.0, "wave_tail": 1.0, "k_half": 0.0}


def test_wave_efficiency_by_hand() -> None:
    assert num_waves(108, 108) == 1 and wave_efficiency(108, 108) == 1.0
    assert num_waves(109, 108) == 2 and wave_efficiency(109, 108) == 109 / 216
    assert wave_efficiency(54, 108) == 0.5 and wave_efficiency(216, 108) == 1.0
    assert wave_efficiency(0, 108) == 0.0
    assert num_tiles(1, 128, 64, 128) == 1 and num_tiles(65, 129, 64, 128) == 4
    assert num_tiles(64 * 109, 128, 64, 128) == 109


def test_work_scale_by_hand() -> None:
    # 109 tiles of 64 x 128 on 108 SMs: 2 full waves paid for 109 tiles' work
    assert work_scale(TILED, 64 * 109, 128, 4096) == pytest.approx(216 / 109)
    # m = 1 pads to 64 rows; 1 tile of 108 slots: the whole wave is paid
    assert work_scale(TILED, 1, 128, 4096) == pytest.approx(108 * 64)
    half = {**TILED, "wave_tail": 0.0, "k_half": 64.0}  # the tail costs its share only; +64 k-steps
    assert work_scale(half, 64 * 109, 128, 4096) == pytest.approx(1.0 + 64 / 4096)
    assert work_scale(half, 32, 128, 4096) == pytest.approx(2.0 * (1.0 + 64 / 4096))  # padding only
    assert work_scale(BASE, 7, 128, 4096) == 1.0  # off without sm_count


def test_compute_time_is_flops_over_wave_efficiency() -> None:
    fit_ = KernelFit("gemm", {**TILED, "bandwidth_bytes_per_s": 1e30, "overhead_s": 0.0, "sharpness": math.inf})
    m, n, k = 64 * 109, 128, 4096
    flops = 2.0 * m * n * k
    assert fit_.analytic_s(m=m, n=n, k=k, dtype="fp16") == pytest.approx(flops / (2.5e14 * 109 / 216))


@pytest.mark.parametrize("tail,k_half", [(1.0, 0.0), (0.2, 50.0), (0.0, 0.0)])
def test_predictions_positive_and_monotone(tail: float, k_half: float) -> None:
    fit_ = KernelFit("gemm", {**TILED, "wave_tail": tail, "k_half": k_half})
    for n, k in itertools.product((128, 1000, 4096, 28672), (512, 4096, 14336)):
        times = [fit_.predict(m=m, n=n, k=k, dtype="fp16") for m in [1, 1.5, *range(2, 5000, 7)]]
        assert all(t > 0 and math.isfinite(t) for t in times)
        assert all(b >= a for a, b in zip(times, times[1:]))
    for m in (1, 100, 3000):
        assert fit_.predict(m=m, n=4096, k=8192, dtype="fp16") >= fit_.predict(m=m, n=4096, k=4096, dtype="fp16")
        assert fit_.predict(m=m, n=4097, k=4096, dtype="fp16") >= fit_.predict(m=m, n=4096, k=4096, dtype="fp16")


def _old_a100() -> dict:
    """The shipped GEMM calibration's dict without the tile parameters (a file written before them)."""
    data = calibration_to_dict(load_calibration(str(CALIBRATIONS / "a100-vidur-linear.yaml")))
    old = copy.deepcopy(data)
    for name in ("sm_count", "tile_m", "tile_n", "wave_tail", "k_half", *REGIME_PARAMS):
        old["kernels"]["gemm"]["params"].pop(name, None)
    old["kernels"]["gemm"]["params"]["x_half"] = 8.0
    return old


@pytest.mark.parametrize("name", ["cpu-epyc-2core.yaml", "old-a100"])
def test_calibrations_without_the_term_predict_as_before(name: str) -> None:
    data = _old_a100() if name == "old-a100" else calibration_to_dict(load_calibration(str(CALIBRATIONS / name)))
    cal = calibration_from_dict(data, file=name)
    gemm = cal.kernels["gemm"]
    assert "sm_count" not in gemm.params and "sm_count" not in gemm.to_dict()["params"]
    for m, n, k in itertools.product((1, 7, 65, 300, 4000), (768, 5000, 28672), (512, 4096)):
        shape = dict(m=m, n=n, k=k, dtype="fp16")
        assert gemm.analytic_s(**shape) == roofline_s(gemm.params, *features("gemm", shape))
    assert calibration_to_dict(calibration_from_dict(calibration_to_dict(cal), file=name)) == calibration_to_dict(cal)


def test_tiled_calibration_round_trips() -> None:
    cal = load_calibration(str(CALIBRATIONS / "a100-vidur-linear.yaml"))
    assert cal.kernels["gemm"].params["sm_count"] == 108
    again = calibration_from_dict(calibration_to_dict(cal), file="x")
    for m in (1, 100, 5000):
        shape = dict(m=m, n=11111, k=3000, dtype="fp16")  # unmeasured: the analytic form
        assert again.predict("gemm", **shape) == cal.predict("gemm", **shape)


@pytest.mark.parametrize("change,key,words", [
    ({"sm_count": 108}, "tile_m", "together"),
    ({"sm_count": 108, "tile_m": 64}, "tile_n", "together"),
    ({"sm_count": 108, "tile_m": 64.5, "tile_n": 128}, "tile_m", "whole number"),
    ({"sm_count": 0, "tile_m": 64, "tile_n": 128}, "sm_count", "from 1"),
    ({"sm_count": 108, "tile_m": 64, "tile_n": 128, "wave_tail": 1.5}, "wave_tail", "from 0 to 1"),
    ({"sm_count": 108, "tile_m": 64, "tile_n": 128, "k_half": -1}, "k_half", "from 0"),
    ({"sm_count": 108, "tile_m": 64, "tile_n": "128"}, "tile_n", "got '128'"),
    ({"sm_count": True, "tile_m": 64, "tile_n": 128}, "sm_count", "got True"),
])
def test_bad_tile_params_name_the_key(change: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        kernel_fit_from_dict("gemm", {"params": {**BASE, **change}}, file="cal.yaml")
    assert err.value.key == f"kernels.gemm.params.{key}" and words in err.value.message


def test_tile_params_only_for_gemm() -> None:
    params = {**BASE, "sm_count": 108, "tile_m": 64, "tile_n": 128}
    with pytest.raises(ConfigError) as err:
        kernel_fit_from_dict("rmsnorm", {"params": params}, file="cal.yaml")
    assert err.value.key == "kernels.rmsnorm.params.sm_count"
    assert kernel_fit_from_dict("gemm", {"params": params}, file="cal.yaml").params["wave_tail"] == 1.0


REGIMED = {**TILED, "tile_m": 128.0, "small_max_m": 64.0, "small_tile_m": 64.0, "small_efficiency": 1.1,
           "mid_max_m": 256.0, "mid_tile_m": 64.0, "mid_efficiency": 0.8}


def test_regimes_pick_the_tile_and_efficiency_by_token_count() -> None:
    assert regime(REGIMED, 1) == regime(REGIMED, 64) == (64.0, 1.1)
    assert regime(REGIMED, 65) == regime(REGIMED, 256) == (64.0, 0.8)
    assert regime(REGIMED, 257) == regime(REGIMED, 8192) == (128.0, 1.0)
    assert regime(TILED, 10) == (64.0, 1.0)  # no regimes: the tile term's tile at efficiency 1
    # 32 tokens pad to one 64-row tile; 1 tile on 108 SMs, the whole wave paid, at 1.1
    assert work_scale(REGIMED, 32, 128, 4096) == pytest.approx(108 * 64 * 128 / (32 * 128) / 1.1)
    # 128 x 108 = 13,824 tokens, one 128-row tile per SM: no padding, one full wave, efficiency 1
    assert work_scale(REGIMED, 128 * 108, 128, 4096) == pytest.approx(1.0)
    # 192 tokens: three 64-row tiles, 3 of 108 slots, at 0.8
    assert work_scale(REGIMED, 192, 128, 4096) == pytest.approx(108 * 64 / 192 / 0.8)


@pytest.mark.parametrize("small,mid", [(1.1, 0.8), (3.0, 0.3), (0.5, 4.0)])
def test_regime_predictions_never_fall_as_m_grows(small: float, mid: float) -> None:
    """A faster kernel past a bound keeps the previous regime's last time (the simulator's contract)."""
    fit_ = KernelFit("gemm", {**REGIMED, "small_efficiency": small, "mid_efficiency": mid, "k_half": 40.0,
                              "wave_tail": 0.3})
    jumps = 0
    for n, k in itertools.product((128, 1000, 4096, 28672), (512, 4096, 14336)):
        times = [fit_.predict(m=m, n=n, k=k, dtype="fp16") for m in range(1, 3000)]
        assert all(t > 0 and math.isfinite(t) for t in times)
        assert all(b >= a for a, b in zip(times, times[1:]))
        jumps += times[64] > times[63] * 1.05 or times[256] > times[255] * 1.05
    assert jumps > 0  # the regimes do change the times at their bounds


def test_regimes_change_only_their_token_ranges() -> None:
    """Efficiency 1 and the large tile in every regime: the plain tile term, to the bit."""
    same = {**REGIMED, "small_efficiency": 1.0, "mid_efficiency": 1.0, "small_tile_m": 128.0, "mid_tile_m": 128.0}
    plain = {**TILED, "tile_m": 128.0}
    for m in (1, 64, 65, 200, 256, 257, 4000):
        shape = dict(m=m, n=4096, k=4096, dtype="fp16")
        assert KernelFit("gemm", same).analytic_s(**shape) == KernelFit("gemm", plain).analytic_s(**shape)


def test_shipped_a100_fit_has_regimes_and_round_trips() -> None:
    cal = load_calibration(str(CALIBRATIONS / "a100-vidur-linear.yaml"))
    params = cal.kernels["gemm"].params
    assert (params["small_max_m"], params["mid_max_m"]) == (64, 256)
    assert set(REGIME_PARAMS) <= set(cal.kernels["gemm"].to_dict()["params"])
    again = calibration_from_dict(calibration_to_dict(cal), file="x")
    assert again.kernels["gemm"].params == cal.kernels["gemm"].params


REGIME_ONLY = {name: REGIMED[name] for name in REGIME_PARAMS}


@pytest.mark.parametrize("change,key,words", [
    ({**REGIME_ONLY, "mid_efficiency": None}, "mid_efficiency", "together"),
    ({"small_max_m": 64}, "small_tile_m", "together"),
    ({**REGIME_ONLY, "mid_max_m": 64}, "mid_max_m", "above small_max_m"),
    ({**REGIME_ONLY, "small_max_m": 64.5}, "small_max_m", "whole number"),
    ({**REGIME_ONLY, "small_efficiency": 0}, "small_efficiency", "from 0.01"),
    ({**REGIME_ONLY, "mid_efficiency": float("nan")}, "mid_efficiency", "from 0.01"),
    ({**REGIME_ONLY, "mid_tile_m": "64"}, "mid_tile_m", "got '64'"),
])
def test_bad_regime_params_name_the_key(change: dict, key: str, words: str) -> None:
    params = {**TILED, **{k: v for k, v in change.items() if v is not None}}
    with pytest.raises(ConfigError) as err:
        kernel_fit_from_dict("gemm", {"params": params}, file="cal.yaml")
    assert err.value.key == f"kernels.gemm.params.{key}" and words in err.value.message


def test_regimes_need_the_tile_term() -> None:
    with pytest.raises(ConfigError) as err:
        kernel_fit_from_dict("gemm", {"params": {**BASE, **REGIME_ONLY}}, file="cal.yaml")
    assert err.value.key == "kernels.gemm.params.sm_count" and "tile/wave term" in err.value.message

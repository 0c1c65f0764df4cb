"""Host time the overlap scheduler does not hide (EngineProfile.exposed_step_host_s / exposed_seq_host_s):
SGLang 0.4's decode step waits for it even with async scheduling on: the ``sglang-0.4`` profile
(sim/cost/profile.py); ``sglang`` (0.5 and later) has none."""

from __future__ import annotations

import dataclasses

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.build import build_profiled_cost
from sim.cost.profile import OVERRIDABLE, PROFILES, ProfileName
from sim.cost.shape import BatchShape
from sim.model.hf_config import load_model

MODEL = load_model("llama-3.3-70b")
CAL = load_calibration("h200")


def cost(profile, tp: int = 4):
    return build_profiled_cost(MODEL, CAL, profile, max_num_seqs=4096, tensor_parallel_size=tp)


def test_only_the_sglang_04_profile_has_exposed_host_time() -> None:
    sg = PROFILES[ProfileName.SGLANG_04]
    assert sg.async_scheduling and min(sg.exposed_step_host_s, sg.exposed_seq_host_s, sg.exposed_kv_token_host_s) > 0
    for name, p in PROFILES.items():
        if name != ProfileName.SGLANG_04:
            assert p.exposed_step_host_s == p.exposed_seq_host_s == p.exposed_kv_token_host_s == 0.0, name
    for key in ("exposed_step_host_s", "exposed_seq_host_s", "exposed_kv_token_host_s"):
        assert key in OVERRIDABLE  # a scenario may set them (profile_overrides)


def test_sglang_04_is_sglang_but_for_the_exposed_host_time() -> None:
    zero = {"exposed_step_host_s": 0.0, "exposed_seq_host_s": 0.0, "exposed_kv_token_host_s": 0.0}
    old = dataclasses.replace(PROFILES[ProfileName.SGLANG_04], name=ProfileName.SGLANG, **zero)
    assert old == PROFILES[ProfileName.SGLANG]


@pytest.mark.parametrize("n", [1, 8, 52, 160, 161, 720])
def test_it_delays_the_device_under_async_scheduling(n: int) -> None:
    """step = max(device + exposed, host): the exposed time adds to the device's, where the rest of the
    host's time still hides behind it (decode graphs up to 160 sequences, eager beyond)."""
    sg = PROFILES[ProfileName.SGLANG_04]
    c = cost(sg)
    shape = BatchShape.decode(n, 780)
    device, host = c.device_time_s(shape), c.host_time_s(shape)
    exposed = sg.exposed_step_host_s + sg.exposed_seq_host_s * n + sg.exposed_kv_token_host_s * n * 780
    assert c.step_time_s(shape) == pytest.approx(max(device + exposed, host), rel=1e-12)
    hidden = cost(sg.with_overrides({"step_host_s": 0.0, "seq_host_s": 0.0}))
    assert hidden.step_time_s(shape) == pytest.approx(device + exposed, rel=1e-12)


def test_it_grows_with_the_batch() -> None:
    sg = PROFILES[ProfileName.SGLANG_04]
    with_it = cost(sg)
    without = cost(dataclasses.replace(sg, exposed_step_host_s=0.0, exposed_seq_host_s=0.0, exposed_kv_token_host_s=0.0))
    gaps = [with_it.step_time_s(BatchShape.decode(n, 780)) - without.step_time_s(BatchShape.decode(n, 780))
            for n in (8, 64, 128)]
    assert gaps[0] < gaps[1] < gaps[2]
    # graph sizes, the host's own time hidden: the gap is the exposed time, per sequence and per KV token
    assert gaps[2] - gaps[1] == pytest.approx(64 * (sg.exposed_seq_host_s + 780 * sg.exposed_kv_token_host_s), rel=1e-6)


def test_without_async_scheduling_the_host_time_is_all_exposed_and_nothing_is_added() -> None:
    """SGLang 0.3 (no overlap scheduler, ``async_scheduling: false``): device + host, the exposed terms unused."""
    serial = PROFILES[ProfileName.SGLANG_04].with_overrides({"async_scheduling": False})
    c = cost(serial)
    shape = BatchShape.decode(64, 780)
    assert c.step_time_s(shape) == pytest.approx(c.device_time_s(shape) + c.host_time_s(shape), rel=1e-12)


def test_the_macro_steps_decode_time_is_the_same_float() -> None:
    c = cost(PROFILES[ProfileName.SGLANG_04])
    for n in (1, 9, 160, 300):
        fn = c.decode_time_fn(n, n)
        for kv in (0, n * 500, n * 4000):
            assert fn(kv) == c.step_time_s(BatchShape(n, 0, n, kv, 0.0, 0, 0))


def test_overrides_zero_it_and_sglang_05_has_none() -> None:
    """``profile_overrides`` zero the three terms of ``sglang-0.4``: its step is then ``sglang``'s (SGLang 0.5 on
    Hopper: FA3, only the new ids streamed)."""
    zeroed = PROFILES[ProfileName.SGLANG_04].with_overrides(
        {"exposed_step_host_s": 0.0, "exposed_seq_host_s": 0.0, "exposed_kv_token_host_s": 0.0})
    c = cost(zeroed, tp=1)
    shape = BatchShape.decode(4, 700)
    assert c.step_time_s(shape) == max(c.device_time_s(shape), c.host_time_s(shape))
    assert c.step_time_s(shape) == cost(PROFILES[ProfileName.SGLANG], tp=1).step_time_s(shape)
    assert cost(PROFILES[ProfileName.SGLANG_04], tp=1).step_time_s(shape) > c.step_time_s(shape)

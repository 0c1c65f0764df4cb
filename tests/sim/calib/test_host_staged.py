"""Tensor-parallel GPUs without peer access (``engine.gpu_p2p: false``): NCCL's host-staged
all-reduce (sim/calib/host_staged.py): the measured curve, its scaling to the host link and the GPU
count, the interconnect every engine sends every size through, a no-P2P step slower than NVLink's,
and the scenario key's bad values as one error line."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sim.calib import host_staged as hs
from sim.calib.calibration import load_calibration
from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.cost.build import build_profiled_cost, with_profile_allreduce
from sim.cost.profile import PROFILES
from sim.cost.shape import BatchShape
from sim.engine.parts import build_plan
from sim.errors import ConfigError
from sim.model.hf_config import load_model

MiB = 1 << 20


def test_at_the_measured_host_link_and_two_gpus_the_curve_is_the_measurement() -> None:
    curve = hs.host_staged_curve(hs.MEASURED_HOST_COPY_BYTES_PER_S, 2)
    for (size, us), got in zip(hs.MEASURED, curve.times, strict=True):
        assert got == pytest.approx(max(us * 1e-6, hs.FLOOR_S), rel=1e-12), size
    # the measured floor: 11.6-12.9 us from 8 B to 4 KiB; busbw 4.0 GB/s for 64-128 MiB
    assert hs.FLOOR_S == pytest.approx(11.8e-6)
    assert hs.MEASURED_BUSBW_BYTES_PER_S == pytest.approx(4.0e9, rel=0.01)
    assert curve.seconds(64, 1 / hs.MEASURED_BUSBW_BYTES_PER_S, hs.FLOOR_S) == pytest.approx(hs.FLOOR_S, rel=0.01)


def test_a_faster_host_link_shortens_everything_but_the_floor_and_more_gpus_lengthen_it() -> None:
    slow, fast = hs.host_staged_curve(12.7e9, 2), hs.host_staged_curve(25e9, 2)
    assert fast.times[0] == slow.times[0] == pytest.approx(hs.FLOOR_S)  # 4 KiB: the host round trip
    big = slow.sizes.index(16 * MiB)
    above = lambda c: c.times[big] - hs.FLOOR_S  # noqa: E731
    assert above(fast) == pytest.approx(above(slow) * 12.7 / 25, rel=1e-12)  # the bytes' part scales with the link
    four = hs.host_staged_curve(25e9, 4)
    assert four.times[0] == pytest.approx(3 * hs.FLOOR_S)  # 2 (n - 1) steps: three times two GPUs' two
    assert four.times[big] - 3 * hs.FLOOR_S == pytest.approx(above(fast) * 1.5, rel=1e-12)  # 2 (n - 1) / n
    assert hs.host_staged_busbw(25e9) == pytest.approx(hs.MEASURED_BUSBW_BYTES_PER_S * 25 / 12.7)


def test_every_engine_sends_every_size_to_the_host_staged_curve() -> None:
    ic = hs.host_staged_interconnect(25e9)
    assert ic.link == hs.SHM_LINK and ic.p2p_bandwidth_bytes_per_s is None
    for name in ("vllm-v1", "trtllm", "eager", "compiled"):  # the custom kernels need peer access
        cal = dataclasses.replace(load_calibration("a100-80gb"), interconnect=ic)
        chosen = with_profile_allreduce(cal, PROFILES[name]).interconnect
        assert chosen.nccl_curve(2) == (ic.numbers(2).allreduce_curve, 0.0), name
        assert chosen.engine_curve(2) is None
        per_byte = chosen.allreduce_s_per_byte(2)
        assert chosen.allreduce_s(7168, 2) == ic.numbers(2).allreduce_curve.seconds(7168, per_byte, hs.FLOOR_S)


def _scenario(**engine) -> dict:
    return {"model": "qwen2.5-7b", "gpu": "a100-80gb",
            "engine": {"max_model_len": 4096, "tensor_parallel_size": 2, "profile": "vllm-v1", **engine},
            "workload": {"num_requests": 1, "arrival": {"type": "offline"},
                         "prompt_tokens": {"type": "fixed", "value": 16},
                         "output_tokens": {"type": "fixed", "value": 4}}}


def _cost(**engine):
    sc = parse_scenario(_scenario(**engine), "x.yaml")
    _, cal, _ = build_plan(sc)
    return cal, build_profiled_cost(load_model("qwen2.5-7b"), cal, PROFILES["vllm-v1"], max_num_seqs=256,
                                    tensor_parallel_size=2)


def test_a_tp2_step_without_p2p_is_slower_than_over_nvlink() -> None:
    nv_cal, nvlink = _cost()
    shm_cal, shm = _cost(gpu_p2p=False)
    assert nv_cal.interconnect.link == "nvlink3" and shm_cal.interconnect.link == hs.SHM_LINK
    for shape in (BatchShape.decode(1, 1024), BatchShape.decode(64, 64 * 1024), BatchShape.prefill(2048)):
        assert shm.step_time_s(shape) > nvlink.step_time_s(shape), shape
    # a 2,048-token chunk: 57 all-reduces of 14.7 MB through the host at ~7.9 GB/s busbw, ~1.9 ms each
    extra = shm.step_time_s(BatchShape.prefill(2048)) - nvlink.step_time_s(BatchShape.prefill(2048))
    assert 57 * 1.5e-3 < extra < 57 * 2.5e-3


def test_gpu_p2p_false_leaves_one_gpu_alone_and_needs_no_interconnect_section() -> None:
    one = parse_scenario(_scenario(tensor_parallel_size=1, gpu_p2p=False), "x.yaml")
    assert build_plan(one)[1].interconnect.link == "nvlink3"  # one GPU: nothing to stage
    base = load_calibration("a100-80gb")
    bare = dataclasses.replace(base, interconnect=None)
    got = hs.without_p2p(bare, False, 2, 1, "x.yaml")
    assert got.interconnect.link == hs.SHM_LINK
    assert got.interconnect.allreduce_bus_bandwidth_bytes_per_s == hs.host_staged_busbw(base.pcie_bandwidth_bytes_per_s)
    assert hs.without_p2p(base, True, 2, 1, "x.yaml") is base


def test_gpu_p2p_with_pipeline_parallelism_or_not_a_bool_is_one_error_line(tmp_path, capsys) -> None:
    with pytest.raises(ConfigError) as err:
        hs.without_p2p(load_calibration("a100-80gb"), False, 2, 2, "x.yaml")
    assert err.value.key == "engine.gpu_p2p" and "\n" not in str(err.value)
    for value, needle in ((False, "pipeline_parallel_size"), ("no", "gpu_p2p")):
        data = _scenario(gpu_p2p=value, pipeline_parallel_size=2 if value is False else 1)
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(data))
        rc = main(["run", str(path), "--quiet", "--no-report", "--out", str(tmp_path / "out")])
        err_text = capsys.readouterr().err.strip()
        assert rc == 2 and len(err_text.splitlines()) == 1, err_text
        assert err_text.startswith(f"error: {path}: engine.gpu_p2p") and needle in err_text

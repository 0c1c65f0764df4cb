"""The GEMM's L2-residency term (sim/calib/gemm_memory.py): by hand, monotone in m, n and k, validated,
round-tripped, dropped for the simulator's cold reads, and off (the old predictions) without its parameters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calib.calibration import load_calibration
from sim.calib.gemm_memory import cold_l2, memory_bytes
from sim.calib.kernel_models import KernelFit, kernel_fit_from_dict
from sim.cost.fitted import build_fitted_cost
from sim.errors import ConfigError
from sim.model.hf_config import load_model

TILED = {"bandwidth_bytes_per_s": 1e12, "flops_per_s": 3e14, "x_half": 0.0, "overhead_s": 2e-6, "item_s": 0.0,
         "sharpness": 3.0, "sm_count": 142.0, "tile_m": 64.0, "tile_n": 128.0, "wave_tail": 0.5, "k_half": 50.0,
         "small_max_m": 64.0, "small_tile_m": 64.0, "small_efficiency": 1.0, "mid_max_m": 256.0,
         "mid_tile_m": 64.0, "mid_efficiency": 1.0, "split_k_len": 1000.0, "max_split_k": 16.0}
L2 = {**TILED, "l2_resident_bytes": 20e6, "l2_resident_bandwidth_bytes_per_s": 3e12, "l2_resident_sharpness": 3.0}


def test_l2_by_hand() -> None:
    # at l2_resident_bytes half the bytes hit: 0.5 / 3 TB/s + 0.5 / 1 TB/s = 2/3 of the DRAM time
    assert memory_bytes(L2, 20e6) == pytest.approx(20e6 * (0.5 / 3 + 0.5))
    assert memory_bytes(L2, 2e6) == pytest.approx(2e6 * (1 / 3), rel=0.01)  # nearly all from L2
    assert memory_bytes(L2, 400e6) == pytest.approx(400e6, rel=1e-3)  # nearly all from DRAM
    assert memory_bytes(TILED, 20e6) == 20e6  # off: the bytes as they are
    # an L2 slower than the DRAM reads at the DRAM's rate
    assert memory_bytes({**L2, "l2_resident_bandwidth_bytes_per_s": 1e11}, 20e6) == pytest.approx(20e6)


def test_off_without_parameters_and_cold() -> None:
    shape = {"m": 8, "n": 4096, "k": 2048, "dtype": "bf16"}
    plain = KernelFit("gemm", TILED).analytic_s(**shape)
    assert KernelFit("gemm", L2).analytic_s(**shape) < 0.7 * plain  # 16.8 MB: 63% of it from L2
    assert KernelFit("gemm", cold_l2(L2)).analytic_s(**shape) == plain
    assert set(cold_l2(L2)) == set(TILED)


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 9000), n=st.integers(16, 70000), k=st.integers(16, 70000),
       field=st.sampled_from(["m", "n", "k"]), extra=st.integers(1, 5000),
       resident=st.sampled_from([1e6, 20e6, 200e6]), sharp=st.sampled_from([0.7, 3.0, 12.0]))
def test_monotone(m, n, k, field, extra, resident, sharp) -> None:
    fit_ = KernelFit("gemm", {**L2, "l2_resident_bytes": resident, "l2_resident_sharpness": sharp})
    shape = {"m": m, "n": n, "k": k, "dtype": "bf16"}
    assert fit_.analytic_s(**{**shape, field: shape[field] + extra}) >= fit_.analytic_s(**shape) * (1 - 1e-12) > 0


def test_round_trip_and_validation() -> None:
    back = kernel_fit_from_dict("gemm", KernelFit("gemm", L2).to_dict(), file="x.yaml")
    assert back.params == pytest.approx(L2, rel=1e-5)
    assert "l2_resident_bytes" not in KernelFit("gemm", TILED).to_dict()["params"]
    with pytest.raises(ConfigError, match=r"params\.l2_resident_sharpness"):
        kernel_fit_from_dict("gemm", {"params": {**TILED, "l2_resident_bytes": 1e6, "l2_resident_bandwidth_bytes_per_s": 1e12}},
                             file="x.yaml")
    with pytest.raises(ConfigError, match=r"params\.l2_resident_bytes"):
        kernel_fit_from_dict("gemm", {"params": {**L2, "l2_resident_bytes": -1.0}}, file="x.yaml")
    untiled = {k: v for k, v in L2.items() if k in ("bandwidth_bytes_per_s", "flops_per_s", "x_half", "overhead_s",
                                                   "item_s", "sharpness") or k.startswith("l2_")}
    assert kernel_fit_from_dict("gemm", {"params": untiled}, file="x.yaml").analytic_s(m=1, n=4096, k=2048) < \
        kernel_fit_from_dict("gemm", {"params": cold_l2(untiled)}, file="x.yaml").analytic_s(m=1, n=4096, k=2048)
    with pytest.raises(ConfigError, match=r"l2_bytes"):  # decode attention's L2 names are not the GEMM's
        kernel_fit_from_dict("gemm", {"params": {**TILED, "l2_bytes": 1e6}}, file="x.yaml")


def test_the_simulated_step_reads_weights_cold() -> None:
    """l40s@vllm's GEMM carries the L2 term; a model's step charges its GEMMs without it."""
    cal = load_calibration("l40s@vllm")
    fit_ = cal.kernels["gemm"]
    assert "l2_resident_bytes" in fit_.params
    cost = build_fitted_cost(load_model("llama-3-8b"), cal, "bf16", 2)
    warm = fit_.analytic_s(m=1, n=4096, k=4096, dtype="bf16")  # 33.6 MB: partly from L2 in the tables
    cold = KernelFit("gemm", cold_l2(fit_.params)).analytic_s(m=1, n=4096, k=4096, dtype="bf16")
    assert cold > 1.1 * warm
    assert cost._gemm(1, 4096, 4096) == pytest.approx(cold)

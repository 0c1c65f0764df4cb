"""The fit: exact on synthetic roofline data, held-out-model GEMM error on real A100 timings."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from microbench.fit import build_grid, cross_validate, fit, fit_kernel, mape
from microbench.records import read_jsonl
from sim.errors import ConfigError
from sim.calib.kernel_models import KernelFit, roofline_s, features

FIXTURES = Path(__file__).parent / "fixtures"
TRUE = {"bandwidth_bytes_per_s": 2e12, "flops_per_s": 3e14, "x_half": 24.0, "overhead_s": 5e-6,
        "item_s": 0.0, "sharpness": math.inf}


def a100_sample() -> dict[str, list[dict]]:
    with open(FIXTURES / "a100_linear_sample.csv") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["model"], []).append({"kernel": "gemm", "m": int(r["m"]), "n": int(r["n"]),
                                               "k": int(r["k"]), "dtype": r["dtype"],
                                               "time_s": float(r["median_ms"]) * 1e-3})
    return out


def synthetic_gemm(shapes=((4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336))) -> list[dict]:
    recs = []
    for n, k in shapes:
        for m in (1, 4, 16, 64, 256, 1024, 4096):
            shape = dict(m=m, n=n, k=k, dtype="bf16")
            recs.append({"kernel": "gemm", **shape, "time_s": roofline_s(TRUE, *features("gemm", shape))})
    return recs


def test_fit_recovers_a_hard_roofline() -> None:
    fitted = fit_kernel("gemm", synthetic_gemm())
    assert fitted.train_mape < 0.01 and fitted.cv_mape < 0.02
    assert fitted.params["bandwidth_bytes_per_s"] == pytest.approx(2e12, rel=0.05)
    assert fitted.params["flops_per_s"] == pytest.approx(3e14, rel=0.1)


def test_held_out_model_gemm_error_on_real_a100_timings() -> None:
    """Fit on Llama-3-8B shapes, predict Llama-2-70B's (never seen): under 8% MAPE."""
    data = a100_sample()
    fitted = fit_kernel("gemm", data["meta-llama/Meta-Llama-3-8B"], grid=False)
    held_out = mape(fitted.params, "gemm", data["meta-llama/Llama-2-70b-hf"])
    assert held_out < 0.08
    # physical: an A100's HBM is 1.5-2.0 TB/s achieved, fp16 tensor cores at most 312 TFLOP/s
    assert 1.2e12 < fitted.params["bandwidth_bytes_per_s"] < 2.1e12
    assert 1.5e14 < fitted.params["flops_per_s"] < 3.12e14
    assert 1e-6 < fitted.params["overhead_s"] < 2e-5


def test_cross_validation_holds_out_whole_shapes() -> None:
    recs = synthetic_gemm()
    cv, folds = cross_validate("gemm", recs, folds=5)
    assert folds == 4  # four shapes: one per fold
    assert cv is not None and cv < 0.02


def test_grid_interpolates_inside_and_anchors_analytic_outside() -> None:
    recs = [{"kernel": "gemm", "m": m, "n": 64, "k": 64, "dtype": "bf16", "time_s": t}
            for m, t in ((1, 1e-5), (4, 2e-5), (16, 1.5e-5), (64, 8e-5))]
    grid = build_grid("gemm", recs)
    assert grid[0].times_s == (1e-5, 2e-5, 2e-5, 8e-5)  # running max: more tokens never faster
    fit_ = KernelFit("gemm", TRUE, grid=grid)
    assert fit_.predict(m=4, n=64, k=64, dtype="bf16") == 2e-5
    assert fit_.predict(m=2, n=64, k=64, dtype="bf16") == pytest.approx(math.sqrt(1e-5 * 2e-5))
    beyond = fit_.predict(m=128, n=64, k=64, dtype="bf16")
    ratio = fit_.analytic_s(m=128, n=64, k=64, dtype="bf16") / fit_.analytic_s(m=64, n=64, k=64, dtype="bf16")
    assert beyond == pytest.approx(8e-5 * ratio)
    assert fit_.predict(m=4, n=128, k=64, dtype="bf16") == fit_.analytic_s(m=4, n=128, k=64, dtype="bf16")


def test_fit_needs_device_numbers_or_a_base() -> None:
    with pytest.raises(ConfigError) as err:
        fit(synthetic_gemm())
    assert err.value.key == "memory_bytes" and "--base" in err.value.message


def test_read_jsonl_names_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    good = {"kernel": "gemm", "m": 1, "n": 2, "k": 3, "dtype": "bf16", "time_s": 1e-5}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "time_s": -1}) + "\n")
    with pytest.raises(ConfigError) as err:
        read_jsonl(path)
    assert err.value.key == "line 2.time_s"
    path.write_text(json.dumps({**good, "kernel": "gemmm"}) + "\n")
    with pytest.raises(ConfigError, match="allowed: gemm"):
        read_jsonl(path)
    path.write_text(json.dumps({**good, "dtype": "fp64"}) + "\n")
    with pytest.raises(ConfigError) as err:
        read_jsonl(path)
    assert err.value.key == "line 1.dtype"

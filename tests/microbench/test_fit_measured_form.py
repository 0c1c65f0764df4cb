"""``microbench fit`` on a GPU's measurements (its device record names the SM count, as ``microbench
calibrate`` writes it) fits the GEMM form the import fits (microbench.gemm_tiles.measured_gemm_tiles):
split-k and its SM-fill cap are found in synthetic timings that have them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from microbench.cli import main
from microbench.gemm_tiles import device_gemm_tiles, measured_gemm_tiles
from sim.calib.kernel_models import KernelFit

TRUE = {"bandwidth_bytes_per_s": 3e12, "flops_per_s": 8e14, "x_half": 0.0, "overhead_s": 2.5e-6, "item_s": 0.0,
        "sharpness": 3.0, "sm_count": 132.0, "tile_m": 64.0, "tile_n": 128.0, "wave_tail": 0.8, "k_half": 150.0,
        "small_max_m": 64.0, "small_tile_m": 64.0, "small_efficiency": 1.0, "mid_max_m": 256.0,
        "mid_tile_m": 64.0, "mid_efficiency": 0.9, "split_k_len": 1200.0, "max_split_k": 16.0, "split_k_fill": 1.5}


def test_the_measured_form_is_the_imports() -> None:
    dev = {"name": "x", "provenance": {"sm_count": "132"}}
    assert measured_gemm_tiles(dev) == device_gemm_tiles(dev, split_k=True, l2=True, split_fill=True)
    assert measured_gemm_tiles({"name": "cpu", "provenance": {}}) is None  # no SM count: the smooth form


def test_microbench_fit_finds_split_k_on_a_gpus_records(tmp_path: Path) -> None:
    device = {"record": "device", "name": "gpu", "gpu_name": "Some GPU", "memory_bytes": 1 << 36,
              "provenance": {"sm_count": "132", "cuda": "12.4"}}
    truth = KernelFit("gemm", TRUE)
    recs = [{"kernel": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16", "time_s": truth.analytic_s(m=m, n=n, k=k)}
            for n in (64, 1024, 4096, 16384) for k in (256, 1024, 4096, 16384, 65536) for m in (1, 16, 128, 1024, 4096)]
    path = tmp_path / "gpu.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [device, *recs]) + "\n")
    out = tmp_path / "gpu.yaml"
    assert main(["fit", str(path), "-o", str(out), "--base", "h100-sxm", "--folds", "2", "--no-grid"]) == 0
    fitted = yaml.safe_load(out.read_text())["kernels"]["gemm"]
    assert fitted["params"]["tile_m"] == 64 and fitted["params"]["tile_n"] == 128  # chosen among the candidates
    for name in ("split_k_len", "max_split_k", "split_k_fill"):
        assert fitted["params"][name] == pytest.approx(TRUE[name], rel=0.05), name
    assert fitted["train_mape"] < 0.01

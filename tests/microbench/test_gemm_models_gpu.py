"""benchmarks/gemm_models_gpu.py: the eight models' linear layers measured in one session, and
the held-out analysis (benchmarks/microbench_a100_gemm.py) run on a CSV of another GPU."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from microbench.gemm_tiles import CUBLAS_REGIMES
from sim.calib.kernel_models import KernelFit

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


gpu_script = _module("gemm_models_gpu")

#: An H100-like card: 132 SMs, a 128x128 tile, the two cuBLAS-like regimes.
TRUTH = {"bandwidth_bytes_per_s": 2.9e12, "flops_per_s": 6.5e14, "x_half": 0.0, "overhead_s": 4e-6,
         "item_s": 0.0, "sharpness": 4.0, "sm_count": 132.0, "tile_m": 128.0, "tile_n": 128.0,
         "wave_tail": 0.5, "k_half": 40.0, "small_max_m": float(CUBLAS_REGIMES[0]),
         "small_tile_m": float(CUBLAS_REGIMES[1]), "small_efficiency": 1.1, "mid_max_m": float(CUBLAS_REGIMES[2]),
         "mid_tile_m": float(CUBLAS_REGIMES[3]), "mid_efficiency": 0.8}


def test_the_shapes_are_the_published_timings_shapes():
    """78 distinct weight shapes over 116 (model, op, TP) rows, as the A100 data set has."""
    rows = [(m, *s) for m, d in gpu_script.MODELS.items() for s in gpu_script.shapes(d)]
    assert len(rows) == 116 and len({(n, k) for *_, n, k in rows}) == 78
    llama3 = dict(((op, tp), (n, k)) for op, tp, n, k in gpu_script.shapes(gpu_script.MODELS["meta-llama/Meta-Llama-3-8B"]))
    assert llama3[("qkv_proj", 1)] == (6144, 4096) and llama3[("down_proj", 8)] == (4096, 1792)
    assert llama3[("gate_up_proj", 2)] == (14336, 4096) and llama3[("o_proj", 4)] == (4096, 1024)
    phi2 = gpu_script.shapes(gpu_script.MODELS["microsoft/phi-2"])
    assert [(op, n, k) for op, _, n, k in phi2][2] == ("gate_up_proj", 10240, 2560)  # one fc1, not gated


def test_grid_and_passes_cover_every_token_count_once():
    grid = gpu_script.m_grid(4096)
    assert grid[:4] == [1, 2, 4, 8] and grid[-1] == 4096 and grid == sorted(set(grid))
    first, second = gpu_script.passes(grid)
    assert sorted(first + second) == grid and first[-1] > 2048  # the first pass alone spans the grid
    assert max(gpu_script.m_grid(300)) <= 300


def test_measures_on_the_cpu_and_writes_the_published_format(tmp_path):
    out = tmp_path / "t.csv"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gemm_models_gpu.py"), "--device", "cpu",
                           "--models", "microsoft/phi-2", "--m", "1,4", "--out", str(out), "--no-analysis"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = list(csv.DictReader(out.open()))
    assert tuple(rows[0]) == gpu_script.FIELDS and len(rows) == 8
    assert {(r["op"], int(r["m"])) for r in rows} == {(op, m) for op in ("qkv_proj", "o_proj", "gate_up_proj",
                                                                              "down_proj") for m in (1, 4)}
    assert all(float(r["median_ms"]) > 0 and float(r["min_ms"]) <= float(r["max_ms"]) for r in rows)
    info = json.loads(gpu_script.device_json(out).read_text())
    assert info["complete"] is True and info["rows"] == 8 and info["gpu_name"] == "cpu" and info["grid"] == [1, 4]


def test_budget_stops_measuring_and_keeps_what_was_timed(tmp_path):
    out = tmp_path / "t.csv"
    n = gpu_script.measure("cpu", ["microsoft/phi-2"], [1, 2], out, budget_s=0.0, log=lambda *_: None)
    assert n == 0 and out.read_text().splitlines() == [",".join(gpu_script.FIELDS)]
    assert json.loads(gpu_script.device_json(out).read_text())["complete"] is False


def test_bad_arguments_exit_2_naming_the_option(tmp_path):
    out = ["--out", str(tmp_path / "t.csv")]
    for args, word in (([*out, "--models", "gpt-5"], "--models"), ([*out, "--m", "1,x"], "--m"),
                       ([*out, "--m", "0"], "--m"), (["--analyze", str(tmp_path / "none.csv")], "--analyze"),
                       ([], "--out")):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gemm_models_gpu.py"), "--device", "cpu",
                               *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and word in proc.stderr.splitlines()[-1], proc.stderr


def test_datasheet_by_device_name():
    assert gpu_script.datasheet_for("NVIDIA H200", 141 << 30) == "h200"
    assert gpu_script.datasheet_for("NVIDIA H100 80GB HBM3", 80 << 30) == "h100-sxm"
    assert gpu_script.datasheet_for("NVIDIA H100 PCIe", 80 << 30) == "h100-pcie"
    assert gpu_script.datasheet_for("NVIDIA A100-SXM4-40GB", 40 << 30) == "a100-40gb"
    assert gpu_script.datasheet_for("NVIDIA L4", 24 << 30) is None


def test_analysis_on_another_gpus_timings_recovers_a_known_form(tmp_path, capsys):
    """Timings made by a known regimes form (1% noise) for every model, analysed from the CSV and
    its device record (an H100 SXM: 132 SMs, the h100-sxm datasheet's peaks): fitted on Llama-3-8B,
    the form's tile and regimes come back, the held-out models come out near the noise, and the
    GEMV fit finds the weight-read bandwidth as a fraction of the datasheet's."""
    truth, rng = KernelFit("gemm", TRUTH), np.random.default_rng(0)
    path = tmp_path / "synthetic.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(gpu_script.FIELDS)
        for model, dims in gpu_script.MODELS.items():
            for op, tp, n, k in gpu_script.shapes(dims):
                for m in (1, 2, 4, 32, 64, 128, 192, 256, 512, 1024, 2048):
                    t = truth.analytic_s(m=m, n=n, k=k, dtype="fp16") * math.exp(rng.normal(0, 0.01))
                    w.writerow(("synthetic", model, op, m, tp, m, n, k, "fp16", t * 1e3, t * 1e3, t * 1e3))
    gpu_script.device_json(path).write_text(json.dumps({"gpu_name": "NVIDIA H100 80GB HBM3", "sm_count": 132,
                                                         "memory_bytes": 85 << 30, "complete": True}))
    _module("microbench_a100_gemm")
    assert gpu_script.main(["--analyze", str(path)]) == 0
    text = capsys.readouterr().out
    assert "tile 128x128 on 132 SMs" in text  # the truth's 1.1 / 0.8 regime efficiencies, within 0.05:
    assert re.search(r"regimes <= 64 / <= 256 tokens at 1\.(0[5-9]|1[0-5]) / 0\.(7[5-9]|8[0-5])", text), text
    means = [line for line in text.splitlines() if "mean over the 7 held-out models" in line]
    regimes = float(means[0].split()[-1].rstrip("%")) / 100
    assert regimes < 0.02, text
    pooled = next(line for line in text.splitlines() if line.strip().startswith("all models"))
    assert "(0.8" in pooled  # ~2.9e12 of the h100-sxm's 3.35e12 (overhead and activations shift it a little)
    assert "H100 80GB HBM3's 3,350 GB/s" in text and "leave one model out" in text and "wrote" not in text


def test_write_is_refused_for_another_gpu(tmp_path):
    analysis = _module("microbench_a100_gemm")
    with pytest.raises(SystemExit) as exc:
        analysis.main(["--csv", str(tmp_path / "none.csv"), "--sms", "132", "--write"])
    assert exc.value.code == 2

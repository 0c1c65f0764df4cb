"""Decode GEMVs' weight-read bandwidth on an A100 and an H100, from one published harness.

Data (``lcy_seso_bench_quant_gemv.csv``): the "torch (ms)" column of lcy-seso/CudaPlayground
``bench_quant_gemv/benchmark/A100.md`` (commit bfac6e9c0d34f1ddf9ffbce5664619ad29e6da89) and
``H100.md`` (commit 21b9dbec48b4dffa2ffa398bf61c07fe02622b7d): ``act @ weight`` in bf16 at batch 1
(``torch_gemv.py``; weight [in_features, out_features]), 30 shapes from 1024x1024 to 16384x53248,
each timed with CUDA events around one synchronized call, the mean of 100 after 10 warm-ups
(``bench_quant_gemv.py``); the same weight every call, no L2 flush. The table lists each shape four
times (its quantized kernel's centroid settings vary; the torch GEMV does not depend on them): four
runs, whose median is used here and whose spread is printed.

Each GPU's timings are fitted as t = t0 + bytes / bandwidth by ``microbench_a100_gemm.gemv_fit``
(least squares on relative error; bytes = the 2-byte weights, the one-row input and output left
out), over every shape and over the shapes of 30 MB and more, 100 MB and more (the small ones are
mostly t0, which here holds the event and launch overheads of a synchronized call, not a graph
replay's). The A100's fit is the check of the harness: the Vidur
A100 timings (cuBLAS fp16, ``benchmarks/microbench_a100_gemm.py --datasheet``) give 0.79 of 2,039
GB/s at 1-4 tokens, the figure ``calibrations/a100-80gb.yaml`` carries.

    python benchmarks/gemv/bandwidth.py
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from microbench_a100_gemm import gemv_fit  # noqa: E402
from sim.calib.calibration import load_calibration  # noqa: E402

DATA = Path(__file__).with_name("lcy_seso_bench_quant_gemv.csv")
#: The datasheet calibration each GPU's fractions are taken against (its peak bandwidth).
DATASHEETS = {"A100": "a100-80gb", "H100": "h100-sxm"}
SUBSETS = (0.0, 30e6, 100e6)


def load(path: Path = DATA) -> dict[str, dict[tuple[int, int], list[float]]]:
    """Per GPU: (in_features, out_features) -> the four runs' seconds."""
    out: dict[str, dict[tuple[int, int], list[float]]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = (int(r["in_features"]), int(r["out_features"]))
            out.setdefault(r["gpu"], {}).setdefault(key, []).append(float(r["torch_ms"]) * 1e-3)
    return out


def fit(shapes: dict[tuple[int, int], list[float]], min_bytes: float = 0.0) -> tuple[float, float, int]:
    """(t0 s, bandwidth bytes/s, shapes used) of t = t0 + bytes / bandwidth on the runs' medians
    of the shapes whose weights are ``min_bytes`` or more."""
    recs = [{"m": 0, "n": n, "k": k, "time_s": statistics.median(ts)}  # m 0: weight bytes only
            for (k, n), ts in shapes.items() if 2.0 * k * n >= min_bytes]
    t0, bw, _ = gemv_fit(recs)
    return t0, bw, len(recs)


def main() -> int:
    data = load()
    for gpu, shapes in data.items():
        cal = load_calibration(DATASHEETS[gpu])
        peak = cal.hbm_bandwidth_bytes_per_s
        spread = statistics.median(max(ts) / min(ts) - 1 for ts in shapes.values())
        print(f"{gpu}: {len(shapes)} shapes x {min(len(ts) for ts in shapes.values())} runs (median spread "
              f"max/min {spread:.1%}); fractions of {cal.name}'s {peak / 1e9:,.0f} GB/s, whose "
              f"bandwidth_efficiency is {cal.bandwidth_efficiency}")
        for lo in SUBSETS:
            t0, bw, n = fit(shapes, lo)
            print(f"  shapes >= {lo / 1e6:3.0f} MB ({n:2d}): t0 {t0 * 1e6:5.1f} us, {bw / 1e9:6,.0f} GB/s = "
                  f"{bw / peak:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

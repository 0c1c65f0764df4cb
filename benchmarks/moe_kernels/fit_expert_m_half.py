"""Fit a MoE layer's fixed time and the experts' GEMM fill (``m_half``, rows per touched expert) on
published fused-MoE timings: the fit behind sim/cost/datasheet.py's MOE_LAYER_FIXED_S (30 us).

kvsim's datasheet cost model times a MoE layer's two expert GEMMs (gate/up: n = 2 x inter, k =
hidden; down: n = hidden, k = inter) as a dense GEMM's smooth roofline over the touched experts:

    touched = E_local x (1 - (1 - top_k / E)^T)
    op time = smax(touched x n k x bytes / (B x weight-read efficiency),
                   (rows + touched x m_half) x 2 n k / (F_mode x eff_max), p = 1.5)

with rows = T x top_k routed rows on this GPU. A dense GEMM's m_half is 8 rows (fitted on real A100
linear-layer timings); a grouped MoE kernel runs each expert's few rows in whole tiles, with less
reuse, so its fill per expert is larger. This script predicts every timing of data.csv (one MoE
layer's call, or one grouped GEMM for DeepGEMM's rows) on kvsim's shipped datasheet calibration of
that GPU for a grid of m_half values and fixed times per MoE layer call (routing, align/sort and
the kernels' floors; DeepGEMM's rows are one GEMM kernel and take none) and prints the mean
absolute error per source and over sources (every source weighs the same).

    python benchmarks/moe_kernels/fit_expert_m_half.py
"""

from __future__ import annotations

import csv
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from sim.calib.calibration import load_calibration  # noqa: E402
from sim.calib.kernel_models import RIDGE_SHARPNESS  # noqa: E402
from sim.calib.precision import gemm_precision  # noqa: E402
from sim.cost.datasheet import smax  # noqa: E402

#: the GPU of a row -> kvsim's datasheet calibration; rows of other GPUs are left out (the H20-3e
#: has the H200's memory, not the shipped h20's; the H20 96GB rows are marked SUSPECT in data.csv)
GPUS = {"H800": "h100-sxm", "H100": "h100-sxm", "H200": "h200", "B200": "b200", "Blackwell": "b200",
        "A100-PCIE-40": "a100-40gb"}
#: dtype column -> (weight dtype, bytes per weight, compute mode or None for the weights' own)
DTYPES = [("nvfp4 weights, bf16 act", ("fp4", 0.5625, "bf16")), ("nvfp4", ("fp4", 0.5625, "fp4")),
          ("mxfp8", ("fp8", 1.0 + 1 / 32, "fp8")), ("fp8", ("fp8", 1.0, "fp8")), ("bf16", ("bf16", 2.0, None))]
GRID = (8, 32, 64, 100, 150, 300)
#: a fixed time per MoE layer call (routing, align/sort and the kernels' own floors), microseconds
FIXED_US = (0, 10, 20, 25, 30, 35, 40)


def calibration_for(gpu: str):
    for prefix, name in GPUS.items():
        if gpu.startswith(prefix) and not gpu.startswith("H20"):
            return load_calibration(name)
    return None


def precision(cal, dtype: str):
    for key, (weights, nbytes, mode) in DTYPES:
        if dtype.lower().startswith(key):
            gp = gemm_precision(cal, weights, nbytes, mode)
            return nbytes, cal.effective_bandwidth_bytes_per_s * gp.weight_read_efficiency, gp.peak_flops * cal.compute_eff_max
    raise ValueError(dtype)


def op_s(touched: float, rows: float, n: int, k: int, nbytes: float, bw: float, flops: float, m_half: float) -> float:
    return smax(touched * n * k * nbytes / bw, (rows + touched * m_half) * 2 * n * k / flops, RIDGE_SHARPNESS)


def predict(row: dict, m_half: float, fixed_s: float = 0.0) -> tuple[float, float] | None:
    """(predicted, measured) seconds of one row, or None when the row cannot be predicted."""
    cal = calibration_for(row["gpu"])
    if cal is None or "SUSPECT" in row["note"]:
        return None
    nbytes, bw, flops = precision(cal, row["dtype"])
    if row["tflops"]:  # DeepGEMM: one grouped GEMM, given as TFLOPS
        m = re.search(r"N=(\d+) K=(\d+); M per group=(\d+)", row["note"])
        if m is None:
            return None
        n, k, per_group = map(int, m.groups())
        groups = int(row["num_experts"])
        measured = 2 * groups * per_group * n * k / (float(row["tflops"]) * 1e12)
        return op_s(groups, groups * per_group, n, k, nbytes, bw, flops, m_half), measured  # one GEMM kernel
    if not (row["hidden"] and row["top_k"] and row["time_us"]):
        return None
    E, topk, hidden, inter, T = (int(row[c]) for c in ("num_experts", "top_k", "hidden", "inter", "num_tokens"))
    local = 32 if "EP=8" in row["tp_or_ep"] else E  # flashinfer's EP8 simulation: 32 of 256 experts here
    touched = local * (1 - (1 - topk / E) ** T)
    rows = T * topk * local / E
    t = op_s(touched, rows, 2 * inter, hidden, nbytes, bw, flops, m_half)
    t += op_s(touched, rows, hidden, inter, nbytes, bw, flops, m_half)
    return t + fixed_s, float(row["time_us"]) * 1e-6


def main() -> int:
    data = list(csv.DictReader(open(HERE / "data.csv", newline="")))
    sources = sorted({r["source_url"].split(" ")[0] for r in data})
    print(f"{len(data)} rows, {len(sources)} sources; mean |predicted / measured - 1| by expert m_half (rows)")
    best = None
    for fixed_us in FIXED_US:
        for m_half in GRID:
            per_source: dict[str, list[float]] = {}
            for r in data:
                pm = predict(r, m_half, fixed_us * 1e-6)
                if pm is not None:
                    per_source.setdefault(r["source_url"].split(" ")[0], []).append(abs(pm[0] / pm[1] - 1))
            # every source weighs the same, however many rows it has
            score = statistics.mean(statistics.mean(v) for v in per_source.values())
            rows = sum(len(v) for v in per_source.values())
            line = ", ".join(f"{s.split('/')[-1] or s.split('/')[-3]} {100 * statistics.mean(v):.0f}%"
                             for s, v in sorted(per_source.items()))
            print(f"  fixed {fixed_us:>3} us, m_half {m_half:>5}: {100 * score:5.1f}% over {len(per_source)} sources"
                  f" ({rows} rows): {line}")
            if best is None or score < best[2]:
                best = (fixed_us, m_half, score)
    print(f"best: fixed {best[0]} us a MoE layer, m_half {best[1]} rows ({100 * best[2]:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

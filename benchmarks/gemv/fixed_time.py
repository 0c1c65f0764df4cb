"""A decode GEMM's fixed device time, from NVIDIA's measured GEMM tables (aiconfigurator-core).

The datasheet roofline charges a GEMM its weight reads at the calibration's bandwidth
(``hbm_bandwidth_bytes_per_s x bandwidth_efficiency``) and, per kernel, the host's launch or a
graph replay's gap (1.3 us). Timed back to back, decode GEMMs take a few microseconds more than
their bytes at that bandwidth, whatever their size: t = t0 + bytes / B. This script fits t0 with B
held at each datasheet calibration's figure (least squares on relative error), over the tables'
bf16 rows of m <= 8 rows (decode batches) and weights of at least 8 MB (below that the kernels
are latency-bound and L2-resident), per backend's table; ``gemm_fixed_s`` in a calibration is the
vLLM table's t0 (sim/cost/datasheet.py: a GEMM costs the longer of its launch and t0).

Data: aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0), ``systems/data/<system>/gemm/<backend>/<version>/
gemm_perf.parquet`` (latency in ms per m, n, k). Needs pandas and the package (the ``import`` extra):

    python benchmarks/gemv/fixed_time.py [--min-mb 8] [--max-m 8]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: aiconfigurator's system name -> the datasheet calibration whose bandwidth the fit holds
SYSTEMS = {"a100_sxm": "a100-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200"}


def datasheet_bandwidth(name: str) -> float:
    data = yaml.safe_load((ROOT / "calibrations" / f"{name}.yaml").read_text())
    return float(data["hbm_bandwidth_bytes_per_s"]) * float(data["bandwidth_efficiency"])


def fixed_time(nbytes: np.ndarray, t: np.ndarray, bandwidth: float) -> tuple[float, float, float]:
    """(t0 s, MAPE of bytes / B alone, MAPE with t0) of t = t0 + bytes / B for a fixed B,
    least squares on relative error: t0 = sum(r / t^2) / sum(1 / t^2), r = t - bytes / B."""
    r = t - nbytes / bandwidth
    t0 = float(np.sum(r / t**2) / np.sum(1.0 / t**2))
    return t0, float(np.mean(np.abs(nbytes / bandwidth / t - 1))), float(np.mean(np.abs((nbytes / bandwidth + t0) / t - 1)))


def main() -> int:
    import aiconfigurator_core  # noqa: PLC0415
    import pandas as pd  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-mb", type=float, default=8.0, help="smallest weight matrix, MB (1e6 bytes)")
    ap.add_argument("--max-m", type=int, default=8, help="largest m (rows: decode sequences)")
    args = ap.parse_args()
    data = Path(aiconfigurator_core.__file__).resolve().parent / "systems" / "data"
    print(f"t = t0 + bytes / B, B the datasheet calibration's; bf16 rows with m <= {args.max_m}, weights >= {args.min_mb:g} MB")
    for system, cal in SYSTEMS.items():
        bw = datasheet_bandwidth(cal)
        for path in sorted((data / system / "gemm").glob("*/*/gemm_perf.parquet")):
            d = pd.read_parquet(path)
            d = d[(d.gemm_dtype == "bfloat16") & (d.m <= args.max_m) & (2.0 * d.n * d.k >= args.min_mb * 1e6)]
            if d.empty:
                continue
            t0, before, after = fixed_time((2.0 * d.n * d.k).to_numpy(), d.latency.to_numpy() * 1e-3, bw)
            backend, version = path.parts[-3], path.parts[-2]
            print(f"  {system:9s} {backend:7s} {version:11s} {len(d):5d} rows  B {bw / 1e12:.3f} TB/s ({cal})  "
                  f"t0 {t0 * 1e6:5.2f} us  MAPE {before:5.1%} -> {after:5.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GEMM fit on real A100 timings: cross-validated error and the held-out-model check.

Data: ../shared/gpu-timings/a100_linear_layers.csv (36,516 linear-layer timings of eight
models on an A100, fp16, CUDA events; measured by the Vidur authors, microsoft/vidur, MIT
license, data/profiling/compute/a100/*/mlp.csv). Steps:

1. fit the GEMM model on Llama-3-8B's shapes (all TP degrees) and predict every other
   model's shapes with the analytic form (no grid: none of their shapes was measured);
   the target is MAPE < 8% on Llama-2-70B;
2. fit on all eight models (5-fold by shape) and, with ``--write``, store that fit as
   calibrations/a100-vidur-linear.yaml, the A100-80GB datasheet giving the numbers the data
   set does not measure (memory, PCIe, copies, attention). Its raw timings are the CSV
   above (3.4 MB; not copied: rerun this script to refit).

    python benchmarks/microbench_a100_gemm.py [--csv PATH] [--write]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import sys
from pathlib import Path

import yaml

from microbench.fit import describe, fit, fit_kernel, mape
from sim.calib.calibration import calibration_to_dict, load_calibration

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT.parent / "shared" / "gpu-timings" / "a100_linear_layers.csv"
TRAIN, HELD_OUT = "meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-2-70b-hf"


def load(path: Path) -> dict[str, list[dict]]:
    """Records per model: {"kernel": "gemm", m, n, k, dtype, time_s, ...}."""
    by_model: dict[str, list[dict]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            by_model.setdefault(r["model"], []).append({
                "kernel": "gemm", "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]), "dtype": r["dtype"],
                "time_s": float(r["median_ms"]) * 1e-3, "model": r["model"], "op": r["op"], "tp": int(r["tp"]),
                "source": "vidur a100 mlp.csv"})
    return by_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--write", action="store_true", help="write calibrations/a100-vidur-linear.yaml")
    args = ap.parse_args(argv)
    by_model = load(args.csv)
    train = fit_kernel("gemm", by_model[TRAIN], grid=False)
    print(f"fit on {TRAIN} ({len(by_model[TRAIN])} timings):\n  {describe(train)}")
    print("held-out models (analytic form, shapes never measured):")
    for model, recs in sorted(by_model.items()):
        tag = "  <- target < 8%" if model == HELD_OUT else ""
        print(f"  {model:<40} {len(recs):5d} timings  MAPE {mape(train.params, 'gemm', recs):6.2%}{tag}")
    everything = [r for recs in by_model.values() for r in recs]
    base = load_calibration("a100-80gb")
    device = {"name": "a100-vidur-linear", "gpu_name": "NVIDIA A100 (Vidur profiling data)",
              "memory_bytes": base.memory_bytes, "provenance": {
                  "date": dt.date.today().isoformat(), "data": "microsoft/vidur data/profiling/compute/a100/*/mlp.csv "
                  "(MIT license), via shared/gpu-timings/a100_linear_layers.csv; fp16, CUDA events, median",
                  "measured": "gemm only (QKV, O, gate_up, down of 8 models, TP 1-8)",
                  "not_measured": "memory, PCIe, copies, attention, norms, step overhead: a100-80gb datasheet",
                  "command": "python benchmarks/microbench_a100_gemm.py --write", "schema": "2",
                  "measurements": "shared/gpu-timings/a100_linear_layers.csv (not copied; 36,516 rows)"}}
    cal = fit(everything, device=device, base=base, name="a100-vidur-linear")
    print(f"fit on all {len(everything)} timings:\n  {describe(cal.kernels['gemm'])}")
    if args.write:
        out = ROOT / "calibrations" / "a100-vidur-linear.yaml"
        out.write_text("# kvsim calibration, schema 2: GEMM fitted on the Vidur A100 linear-layer timings;\n"
                       "# every other number is the a100-80gb datasheet's (see provenance).\n"
                       + yaml.safe_dump(calibration_to_dict(cal), sort_keys=False, width=120))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

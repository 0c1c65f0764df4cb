"""How well kvsim's kernel forms fit NVIDIA's published kernel tables, on shapes the fit never saw.

    python benchmarks/aiconfigurator_fit.py [--systems h100_sxm h200_sxm ...] [--backend vllm]
        [--kernels gemm prefill_attention decode_attention] [--split-k] [--gemm-l2] [--decode-l2 auto|on|off]
        [--decode-mha auto|on|off] [--decode-mmha auto|on|off]

Needs the [import] extra (aiconfigurator-core, pandas, pyarrow). For each system it converts the
tables as ``microbench import aiconfigurator`` does and reports, per kernel, the MAPE of the
analytic form (microbench.fit, the GEMM with its tile/wave term) on held-out data:

- ``shapes``: 5-fold cross-validation by shape (every (n, k) of a GEMM, every (batch, heads, KV
  heads, head dim) of attention held out whole), the figure the calibration's ``cv_mape`` holds;
- ``every 5th k`` (GEMM): the rows of every fifth k value held out (k sorted), fitted on the rest;
  ``every 5th head set`` (attention): every fifth (heads, KV heads, head dim) combination held out,
  as a model never measured would be;
- ``layer shapes``: the ``shapes`` figure on GEMMs with n and k >= 1024 only (real layers' weights;
  the tables also time 32 x 32 GEMMs no model has);
- ``--split-k``: the GEMM fitted with the split-k term (sim/calib/gemm_tiles.py; off in the shipped
  calibrations, see benchmarks/RESULTS.md);
- ``--gemm-l2``: the GEMM fitted with the L2-residency term too (sim/calib/gemm_memory.py);
- ``--decode-l2``: decode attention's L2-residency term (sim/calib/attention_terms.py): ``auto`` (the
  default, as ``microbench fit``) fitted from the fit without it and kept where it lowers the fit's
  loss, ``on`` fitted on every table, ``off`` never;
- ``--decode-mha``: decode attention's query-group swap term (FlashAttention-2's MHA unsplit, GQA's
  swap copies; sim/calib/attention_terms.py): ``auto`` (the default, as ``microbench fit``) on the
  tables of FlashAttention-2's varlen decode only, ``on`` / ``off`` on every table or none;
- ``--decode-mmha``: decode attention's MMHA-fallback term (TensorRT-LLM's MHA and groups over 32
  query heads per KV head; sim/calib/attention_terms.py): ``auto`` (the default, as ``microbench fit``)
  on TensorRT-LLM's tables, kept where it lowers the fit's loss, ``on`` / ``off`` on every table or none;
- ``cross-GPU``: H100 SXM's fit with its bandwidth scaled by the datasheets' HBM ratio (FLOP/s
  kept: the same die), predicting H200 SXM's measurements, against H200's own held-out figure.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import microbench.attention_fit  # noqa: E402
from microbench.aiconfigurator import SYSTEMS, import_records  # noqa: E402
from microbench.fit import _predict, cross_validate, fit_params  # noqa: E402
from microbench.gemm_tiles import device_gemm_tiles  # noqa: E402
from sim.calib.calibration import load_calibration  # noqa: E402

KERNELS = ("gemm", "prefill_attention", "decode_attention")


def mape(params: dict, kernel: str, records: list[dict]) -> float:
    t = np.array([r["time_s"] for r in records])
    return float(np.mean(np.abs(_predict(params, kernel, records) / t - 1.0)))


def held_out_groups(kernel: str, records: list[dict], tiles) -> float:
    """Every fifth k (GEMM) or every fifth (heads, KV heads, head dim) held out, fitted on the rest."""
    key = (lambda r: r["k"]) if kernel == "gemm" else (lambda r: (r["num_q_heads"], r["num_kv_heads"], r["head_dim"]))
    values = sorted({key(r) for r in records})
    errors, n = 0.0, 0
    for offset in range(5):
        held = set(values[offset::5])
        train = [r for r in records if key(r) not in held]
        test = [r for r in records if key(r) in held]
        if not train or not test:
            continue
        p = fit_params(kernel, train, tiles)
        errors += mape(p, kernel, test) * len(test)
        n += len(test)
    return errors / n


def study(system: str, backend: str, kernels=KERNELS, split_k: bool = False,
          l2: bool = False) -> tuple[dict, dict[str, list[dict]]]:
    records, device, _ = import_records(system, backend)
    gemm_tiles = device_gemm_tiles(device, split_k, l2)
    by_kernel = defaultdict(list)
    for r in records:
        by_kernel[r["kernel"]].append(r)
    row = {}
    for kernel in kernels:
        recs = by_kernel[kernel]
        tiles = gemm_tiles  # the GEMM's tile/wave term; the attention terms (microbench.attention_fit)
        cv, _ = cross_validate(kernel, recs, 5, tiles=tiles)
        row[(kernel, "shapes")] = cv
        row[(kernel, "groups")] = held_out_groups(kernel, recs, tiles)
        if kernel == "gemm":
            layer = [r for r in recs if r["n"] >= 1024 and r["k"] >= 1024]
            row[(kernel, "layer")], _ = cross_validate(kernel, layer, 5, tiles=tiles)
        row[(kernel, "n")] = len(recs)
    return row, by_kernel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    ap.add_argument("--split-k", action="store_true", help="fit the GEMM with the split-k term")
    ap.add_argument("--gemm-l2", action="store_true", help="fit the GEMM with the L2-residency term")
    ap.add_argument("--decode-l2", choices=("auto", "on", "off"), default="auto",
                    help="decode attention's L2-residency term: kept where it lowers the loss (auto), always, never")
    ap.add_argument("--decode-mha", choices=("auto", "on", "off"), default="auto",
                    help="decode attention's query-group swap term: on FlashAttention-2's tables (auto), always, never")
    ap.add_argument("--decode-mmha", choices=("auto", "on", "off"), default="auto",
                    help="decode attention's MMHA-fallback term: on TensorRT-LLM's tables (auto), always, never")
    args = ap.parse_args()
    microbench.attention_fit.DECODE_L2 = {"auto": None, "on": True, "off": False}[args.decode_l2]
    microbench.attention_fit.DECODE_MHA = {"auto": None, "on": True, "off": False}[args.decode_mha]
    microbench.attention_fit.DECODE_MMHA = {"auto": None, "on": True, "off": False}[args.decode_mmha]
    rows, data = {}, {}
    for system in args.systems:
        t0 = time.perf_counter()
        rows[system], data[system] = study(system, args.backend, args.kernels, args.split_k, args.gemm_l2)
        print(f"{system}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(f"| {args.backend} tables | kernel | records | held-out shapes | every 5th k / head set | layer shapes (GEMM) |")
    print("|---|---|---|---|---|---|")
    for system, row in rows.items():
        for kernel in args.kernels:
            layer = row.get((kernel, "layer"))
            print(f"| {system} | {kernel} | {row[(kernel, 'n')]:,} | {row[(kernel, 'shapes')]:.2%} | "
                  f"{row[(kernel, 'groups')]:.2%} | {'' if layer is None else f'{layer:.1%}'} |")
    if "h100_sxm" in data and "h200_sxm" in data:
        h100, h200 = load_calibration("h100-sxm"), load_calibration("h200")
        ratio = h200.effective_bandwidth_bytes_per_s / h100.effective_bandwidth_bytes_per_s
        print(f"\ncross-GPU: H100 SXM's fit, bandwidth x {ratio:.3f} (datasheet HBM ratio), predicting H200 SXM:")
        h100_tiles = device_gemm_tiles({"provenance": {"sm_count": "132"}}, args.split_k, args.gemm_l2)
        for kernel in args.kernels:
            p = fit_params(kernel, data["h100_sxm"][kernel], h100_tiles)
            same = mape(p, kernel, data["h200_sxm"][kernel])
            p = {**p, "bandwidth_bytes_per_s": p["bandwidth_bytes_per_s"] * ratio}
            print(f"  {kernel}: {mape(p, kernel, data['h200_sxm'][kernel]):.1%} scaled, {same:.1%} unscaled "
                  f"(H200's own held-out shapes: {rows['h200_sxm'][(kernel, 'shapes')]:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

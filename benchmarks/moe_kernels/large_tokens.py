"""kvsim's MoE layer time against published fused-MoE timings at 256 to 32,768 tokens.

``large_tokens.csv`` holds 143 published timings (10 GitHub threads, collected 2026-12-01 for issue #13:
DeepGEMM's Mega MoE and DeepEP baselines on H200, vLLM's DeepGEMM and FlashInfer expert-parallel MoE on
B200, vLLM's Triton fused_moe on L40S and H100, FlashInfer's CUTLASS and cuTile MoE on L40S, and more), each
with its URL and an exact quote. This script predicts the rows kvsim can, with the datasheet cost model's
MoE layer (the expert GEMMs of ``fit_expert_m_half.py`` plus MOE_LAYER_FIXED_S) on kvsim's shipped
calibration of the row's GPU, and prints the signed error per row and the mean per source and token
range. Expert-parallel rows (``EP8``: the GPU holds E/8 experts and receives tokens x top_k routed rows)
include the NVLink dispatch and combine, which kvsim's MoE layer does not time: read them as an upper bound
of the compute. Rows without a calibration (B300, H20-3e, H20), of an unstated dtype, or of one GEMM are
skipped.

The prediction is the whole MoE layer as a kvsim step charges it: the expert GEMMs, the layer's fixed time
and its non-GEMM traffic at the calibration's achieved bandwidth (``sim.model.spec``: the routing's top-k,
permute and unpermute, ``moe_routing_bytes_per_token``, 4 x top_k x hidden activations a token; the gated
activation between the two GEMMs, ``elementwise_bytes_per_token``, 3 x top_k x the expert width; 16-bit
activations). ``--gemm-only`` leaves the traffic out, as this script did before 2026-12-02: at thousands of
tokens the traffic is as large as the GEMMs, and leaving it out read as "kvsim is too fast" on every
fine-grained row (benchmarks/RESULTS.md, round 11).

    python benchmarks/moe_kernels/large_tokens.py [--gemm-only]
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import fit_expert_m_half as fit  # noqa: E402
from sim.calib.calibration import load_calibration  # noqa: E402
from sim.cost.datasheet import MOE_LAYER_FIXED_S  # noqa: E402

#: the GPU column's prefix -> kvsim's datasheet calibration
GPUS = {"L40S": "l40s", "H200": "h200", "B200": "b200", "H100": "h100-sxm"}
#: the dtype column's prefix -> the key of fit_expert_m_half.DTYPES
DTYPES = (("nvfp4", "nvfp4"), ("mxfp8", "mxfp8"), ("fp8", "fp8"), ("bf16", "bf16"))
#: the expert GEMMs' fill per touched expert, rows (fit_expert_m_half.py's fit)
M_HALF = 8
BUCKETS = ((256, 1024), (1025, 4096), (4097, 32768))


#: bytes of a 16-bit activation element
ACT_BYTES = 2.0


def layer_traffic_bytes(tokens: int, rows: int, experts: int, top_k: int, hidden: int, inter: int,
                        routed_here: bool) -> float:
    """The MoE layer's non-GEMM bytes as kvsim's step charges them (module docstring): per routed row
    (token x top_k) the permute and unpermute (4 x hidden) and the gated activation (3 x inter); per token
    the top-k over the router logits and its ids and weights, where the tokens are routed on this GPU."""
    per_row = (4 * hidden + 3 * inter) * ACT_BYTES
    per_token = experts * ACT_BYTES + 8 * top_k if routed_here else 0.0
    return rows * per_row + tokens * per_token


def predict(row: dict, gemm_only: bool = False) -> tuple[float, float] | None:
    """(predicted, measured) seconds of one whole-MoE row, or None when kvsim cannot predict it."""
    cal = next((load_calibration(name) for prefix, name in GPUS.items() if row["gpu"].startswith(prefix)), None)
    dtype = next((key for prefix, key in DTYPES if row["dtype"].lower().startswith(prefix)), None)
    if cal is None or dtype is None or row["scope"] != "whole-moe" or not row["time_us"]:
        return None
    nbytes, bw, flops = fit.precision(cal, dtype)
    experts, top_k, hidden, inter, tokens = (int(row[c]) for c in
                                             ("num_experts", "top_k", "hidden", "inter_per_gpu", "num_tokens"))
    ep = row["tp_or_ep"].startswith("EP8")
    local = experts // 8 if ep else experts
    # EP: every rank's tokens are routed over all E experts; this rank holds E/8 and gets tokens x top_k rows
    touched = local * (1 - (1 - top_k / experts) ** (tokens * (8 if ep else 1)))
    rows = tokens * top_k if ep else tokens * top_k * local / experts
    t = fit.op_s(touched, rows, 2 * inter, hidden, nbytes, bw, flops, M_HALF)
    t += fit.op_s(touched, rows, hidden, inter, nbytes, bw, flops, M_HALF)
    if not gemm_only:  # the routed rows' traffic (EP: the rows this rank receives)
        t += layer_traffic_bytes(tokens, rows, experts, top_k, hidden, inter, not ep) \
            / (cal.hbm_bandwidth_bytes_per_s * cal.bandwidth_efficiency)
    return t + MOE_LAYER_FIXED_S, float(row["time_us"]) * 1e-6


def main(argv: list[str] | None = None) -> int:
    gemm_only = "--gemm-only" in (sys.argv[1:] if argv is None else argv)
    rows = list(csv.DictReader(open(HERE / "large_tokens.csv", newline="")))
    by_source: dict[str, list[tuple[int, float]]] = {}
    print(f"{'source':<22} {'GPU':<6} {'backend':<24} {'dtype':<6} {'E':>4} {'H':>5} {'N':>5} {'par':<3} "
          f"{'tokens':>6} {'meas us':>8} {'kvsim us':>8} {'error':>6}")
    for r in rows:
        pm = predict(r, gemm_only)
        if pm is None or int(r["num_tokens"]) < 256:
            continue
        err = pm[0] / pm[1] - 1
        parts = r["url"].rstrip("/").split("/")
        source = f"{parts[-3]}#{parts[-1]}"
        key = f"{source} {r['gpu'][:4]} {r['dtype'][:5]} {r['backend'][:18]}"
        by_source.setdefault(key, []).append((int(r["num_tokens"]), err))
        print(f"{source:<22} {r['gpu'][:6]:<6} {r['backend'][:24]:<24} {r['dtype'][:6]:<6} {r['num_experts']:>4} "
              f"{r['hidden']:>5} {r['inter_per_gpu']:>5} {'EP' if r['tp_or_ep'].startswith('EP8') else 'TP':<3} "
              f"{r['num_tokens']:>6} {pm[1] * 1e6:8.1f} {pm[0] * 1e6:8.1f} {err:+6.0%}")
    print("\nmean signed error (kvsim / measured - 1) per source and token range:")
    print(f"  {'source, GPU, dtype, backend':<50} " + " ".join(f"{f'{lo}-{hi}':>11}" for lo, hi in BUCKETS))
    for key, errs in sorted(by_source.items()):
        cells = []
        for lo, hi in BUCKETS:
            sel = [e for t, e in errs if lo <= t <= hi]
            cells.append(f"{statistics.mean(sel):+.0%} ({len(sel)})" if sel else "-")
        print(f"  {key:<50} " + " ".join(f"{c:>11}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

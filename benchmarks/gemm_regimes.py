"""A GEMM cost-model form with cuBLAS-like kernel regimes, scored on the real A100 linear-layer timings (a study).

Fits the form below on Meta-Llama-3-8B's timings only (and, second, on Llama-3-8B + phi-2),
predicts every other model's shapes, and prints MAPE = mean |pred / measured - 1| per model
and the mean over the held-out models. Needs numpy + scipy only.

Form ("regime tiles"): cuBLAS-like tile/wave quantisation whose tile height (rows = tokens)
and kernel efficiency depend on the token count m, as cuBLAS switches kernels:

    regime r(m):  0 if m <= 64        (skinny kernels: 64-row tiles, efficiency e0)
                  1 if 64 < m <= 256  (64-row tiles, efficiency e1)
                  2 if m > 256        (128-row tiles, efficiency 1)
    tile_m = (64, 64, 128)[r], tile_n = 128, S = 108 SMs (A100 datasheet)
    tiles  = ceil(m / tile_m) * ceil(n / tile_n)
    full   = tiles / S ; waves = ceil(full)
    paid   = full + wave_tail * (waves - full)                 (waves paid)
    comp   = paid * [2 * tile_m * tile_n * (k + k_half)] / (F * eff[r] / S)
    mem    = 2 bytes * (m*k + k*n + m*n) / bw
    time   = t0 + smax(mem, comp; p),  smax(a, b; p) = (a^p + b^p)^(1/p)

Fitted parameters: bw, F, t0, p (sharpness), wave_tail, k_half, e0, e1, by least squares on
the relative error (pred/measured - 1, soft-L1, f_scale 0.02) over the training model's
timings with m <= 4096 (the token range of a serving step and of the other models' data).

    python benchmarks/gemm_regimes.py [--csv PATH] [--all-m] [--baseline]

The project's fitted form took the regimes (sim/calib/gemm_tiles.py, microbench.gemm_tiles.CUBLAS_REGIMES,
fitted with the project's log-error loss on every token count: benchmarks/microbench_a100_gemm.py); this
study's own loss and m <= 4096 training rows are kept to reproduce its figures (benchmarks/RESULTS.md,
"Microbench fits", the regimes study).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

CSV = Path(__file__).resolve().parents[2] / "shared" / "gpu-timings" / "a100_linear_layers.csv"  # as microbench_a100_gemm.py
TRAIN, SECOND = "meta-llama/Meta-Llama-3-8B", "microsoft/phi-2"
SMS = 108  # NVIDIA A100 datasheet: SMs
REGIME_BOUNDS = (64, 256)  # m <= 64 | 64 < m <= 256 | m > 256
TILE_M = (64, 64, 128)  # tile rows (tokens) per regime
TILE_N = 128  # tile columns (output features)
TRAIN_MAX_M = 4096

# name: (start, lower, upper)
PARAMS = {
    "bw": (1.8e12, 1e11, 1e13),  # bytes/s
    "F": (2.3e14, 1e13, 1e15),  # FLOP/s of the large-m kernels
    "t0": (4e-6, 1e-7, 1e-4),  # s per launch
    "sharp": (2.0, 1.0, 30.0),  # smooth-max exponent
    "wave_tail": (0.5, 1e-4, 1.0),  # share of a full wave a partial last wave costs
    "k_half": (64.0, 1e-3, 1e5),  # pipeline fill + epilogue per tile, in k-steps
    "e0": (1.0, 0.1, 10.0),  # efficiency of the m <= 64 kernels relative to F
    "e1": (1.0, 0.1, 10.0),  # efficiency of the 64 < m <= 256 kernels relative to F
}


def load(path: str):
    rows = list(csv.DictReader(open(path, newline="")))
    mod = np.array([r["model"] for r in rows])
    m, n, k = (np.array([float(r[c]) for r in rows]) for c in ("m", "n", "k"))
    t = np.array([float(r["median_ms"]) * 1e-3 for r in rows])
    return mod, m, n, k, t


def predict(p: dict, m, n, k):
    """Seconds per GEMM launch of [m x k] @ [k x n], fp16 (vectorised)."""
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    r = np.digitize(m, np.array(REGIME_BOUNDS) + 0.5)
    tm = np.array(TILE_M, dtype=float)[r]
    eff = np.array([p["e0"], p["e1"], 1.0])[r]
    tiles = np.ceil(m / tm) * np.ceil(n / TILE_N)
    full = tiles / SMS
    paid = full + p["wave_tail"] * (np.ceil(full) - full)
    comp = paid * 2.0 * tm * TILE_N * (k + p["k_half"]) * SMS / (p["F"] * eff)
    mem = 2.0 * (m * k + k * n + m * n) / p["bw"]
    hi, lo = np.maximum(mem, comp), np.minimum(mem, comp)
    s = p["sharp"]
    return p["t0"] + hi * (1.0 + (lo / hi) ** s) ** (1.0 / s)


def fit(m, n, k, t) -> dict:
    names = list(PARAMS)
    x0 = np.log([PARAMS[x][0] for x in names])
    lo = np.log([PARAMS[x][1] for x in names])
    hi = np.log([PARAMS[x][2] for x in names])

    def res(lp):
        return predict(dict(zip(names, np.exp(lp))), m, n, k) / t - 1.0

    r = least_squares(res, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.02)
    return dict(zip(names, np.exp(r.x)))


def baseline_fit(m, n, k, t) -> dict:
    """The current repository form (one tile for all m, chosen among 7 by training loss;
    log-error soft-L1 f_scale 0.05, all m), for comparison."""
    best = None
    names = ["bw", "F", "t0", "sharp", "wave_tail", "k_half"]
    for tm, tn in ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (128, 256), (256, 128)):
        def f(p, tile=(tm, tn)):
            return baseline_predict({**p, "tile": tile}, m, n, k)
        x0 = np.log([PARAMS[x][0] for x in names])
        lo = np.log([PARAMS[x][1] for x in names])
        hi = np.log([PARAMS[x][2] for x in names])
        r = least_squares(lambda lp: np.log(f(dict(zip(names, np.exp(lp))))) - np.log(t), x0,
                          bounds=(lo, hi), loss="soft_l1", f_scale=0.05)
        if best is None or r.cost < best[0]:
            best = (r.cost, {**dict(zip(names, np.exp(r.x))), "tile": (tm, tn)})
    return best[1]


def baseline_predict(p, m, n, k):
    tm, tn = p["tile"]
    tiles = np.ceil(m / tm) * np.ceil(n / tn)
    full = tiles / SMS
    work = 2 * m * n * k * (full + p["wave_tail"] * (np.ceil(full) - full)) * SMS * tm * tn / (m * n) \
        * (1 + p["k_half"] / k)
    mem, comp = 2 * (m * k + k * n + m * n) / p["bw"], work / p["F"]
    hi_, lo_ = np.maximum(mem, comp), np.minimum(mem, comp)
    return p["t0"] + hi_ * (1 + (lo_ / hi_) ** p["sharp"]) ** (1 / p["sharp"])


def monotonicity(p, shapes) -> tuple[int, float]:
    """(number of decreasing steps, largest relative decrease) over m = 1..8192 (step 1)."""
    m = np.arange(1, 8193, dtype=float)
    count, worst = 0, 0.0
    for n, k in shapes:
        y = predict(p, m, np.full_like(m, n), np.full_like(m, k))
        d = y[1:] / y[:-1] - 1
        count += int(np.sum(d < -1e-12))
        worst = min(worst, float(d.min()))
    return count, worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default=CSV)
    ap.add_argument("--all-m", action="store_true", help="train on all token counts (not only m <= 4096)")
    ap.add_argument("--baseline", action="store_true", help="also fit and show the current repository form")
    args = ap.parse_args()
    start = time.perf_counter()
    mod, M, N, K, T = load(args.csv)
    models = sorted(set(mod))
    for trained in ((TRAIN,), (TRAIN, SECOND)):
        idx = np.isin(mod, trained)
        if not args.all_m:
            idx &= M <= TRAIN_MAX_M
        p = fit(M[idx], N[idx], K[idx], T[idx])
        base = baseline_fit(M[np.isin(mod, trained)], N[np.isin(mod, trained)], K[np.isin(mod, trained)],
                            T[np.isin(mod, trained)]) if args.baseline else None
        print(f"fit on {' + '.join(trained)} ({idx.sum()} timings"
              f"{'' if args.all_m else f', m <= {TRAIN_MAX_M}'}):")
        print("  " + ", ".join([f"bw {p['bw'] / 1e9:.0f} GB/s", f"F {p['F'] / 1e12:.1f} TFLOP/s",
                                f"t0 {p['t0'] * 1e6:.2f} us", f"sharpness {p['sharp']:.2f}",
                                f"wave_tail {p['wave_tail']:.3f}", f"k_half {p['k_half']:.1f}",
                                f"e0 {p['e0']:.3f}", f"e1 {p['e1']:.3f}"]))
        hdr = f"  {'model':<42} {'timings':>7}  {'best':>6}" + (f"  {'current':>7}" if base else "")
        print(hdr)
        held, held_b = [], []
        for md in models:
            i = mod == md
            e = float(np.mean(np.abs(predict(p, M[i], N[i], K[i]) / T[i] - 1)))
            eb = float(np.mean(np.abs(baseline_predict(base, M[i], N[i], K[i]) / T[i] - 1))) if base else None
            if md not in trained:
                held.append(e)
                held_b.append(eb)
            tag = "  (training)" if md in trained else ""
            print(f"  {md:<42} {i.sum():7d}  {e:6.2%}" + (f"  {eb:7.2%}" if base else "") + tag)
        print(f"  {f'mean over the {len(held)} held-out models':<42} {'':>7}  {np.mean(held):6.2%}"
              + (f"  {np.mean(held_b):7.2%}" if base else ""))
        cnt, worst = monotonicity(p, sorted(set(zip(N, K))))
        print(f"  monotone in m (m = 1..8192, all {len(set(zip(N, K)))} shapes): {cnt} decreasing steps, "
              f"largest decrease {worst:.2%}")
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

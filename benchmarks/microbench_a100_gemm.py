"""GEMM fit on real A100 timings: cross-validated error and the held-out-model check.

Data: ../shared/gpu-timings/a100_linear_layers.csv (36,516 linear-layer timings of eight
models on an A100, fp16, CUDA events; measured by the Vidur authors, microsoft/vidur, MIT
license, data/profiling/compute/a100/*/mlp.csv). Steps:

1. fit the GEMM model on Llama-3-8B's shapes (all TP degrees) and predict every other
   model's shapes with the analytic form (no grid: none of their shapes was measured),
   three times: the smooth roofline form (``old``), the form with cuBLAS's tile and wave
   quantisation (``tiles``: sim/calib/gemm_tiles.py; the A100's 108 SMs from its datasheet,
   the tile chosen among microbench.gemm_tiles.CUBLAS_TILES by the training loss) and the same with
   cuBLAS-like kernel regimes (``regimes``: tile height and efficiency by token count,
   microbench.gemm_tiles.CUBLAS_REGIMES; what ``microbench calibrate`` fits on a GPU); per model and
   the mean over the seven held-out models;
2. the same fitted on two models (Llama-3-8B and phi-2), predicting the other six;
3. fit on all eight models (5-fold by shape, regimes form) and, with ``--write``, store that fit as
   calibrations/a100-vidur-linear.yaml, the A100-80GB datasheet giving the numbers the data
   set does not measure (memory, PCIe, copies, attention). Its raw timings are the CSV
   above (3.4 MB; not copied: rerun this script to refit).

With ``--datasheet`` it first prints the numbers the A100 datasheet calibrations
(calibrations/a100-80gb.yaml, a100-40gb.yaml) take from these timings:

- ``bandwidth_efficiency``: what decode's weight reads achieve. Every timing at m <= 4 (a
  batch-1 to batch-4 decode GEMM, weight-bound) fitted as t = t0 + bytes / bandwidth (least
  squares on relative error; bytes = the fp16 weights plus the m-row activations), pooled and
  per model: 1,607 GB/s pooled (0.79 of the A100-80GB's 2,039 GB/s; per model 1,594-1,644
  GB/s, 0.78-0.81), t0 4.2-6.2 us a launch (a check of ``kernel_launch_s``, 4 us);
- ``compute_efficiency``: the datasheet cost model's own form (the smooth roofline, no tiles,
  no launch term) fitted on Llama-3-8B's timings: 227.7 TFLOP/s, ``eff_max`` 0.73 of the
  datasheet's 312; ``m_half_tokens`` 8.0 and ``RIDGE_SHARPNESS`` 1.5 (sim/calib/kernel_models.py)
  come from the same fit.

With ``--floor`` it first prints the error floor of the model form: the tile form fitted to
each shape of each model alone (every parameter free per shape, in-sample): no parameters
shared across shapes can predict a held-out model better than this, so the held-out MAPE
cannot reach that model's floor. On these timings the floor is 4.0-6.1% per model (Llama-2-70B
4.9%, InternLM-20B 6.1%; 5.2% mean over the seven models held out from Llama-3-8B, against the
fit's 6.4%): the timings jump where cuBLAS switches kernels, at token counts that differ from
shape to shape.

With ``--lomo`` it also leaves one model out in turn (fitted on the other seven's timings): one tile
6.31%, regimes 5.92% mean over the eight models.

The same analysis runs on any CSV of this format: ``benchmarks/gemm_models_gpu.py`` measures the eight models'
shapes on the GPU at hand in one session and calls it with that GPU's SM count and peaks (``--sms``,
``--peak-bw``, ``--peak-flops``; ``--write`` is for the A100 data only).

    python benchmarks/microbench_a100_gemm.py [--csv PATH] [--write] [--floor] [--datasheet] [--lomo]
        [--sms N --peak-bw B/s --peak-flops FLOP/s --label NAME]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from microbench.fit import describe, fit, fit_kernel, fit_params, mape
from microbench.gemm_tiles import CUBLAS_REGIMES, GemmTiles
from sim.calib.calibration import calibration_to_dict, load_calibration

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT.parent / "shared" / "gpu-timings" / "a100_linear_layers.csv"
TRAIN, HELD_OUT = "meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-2-70b-hf"
SECOND = "microsoft/phi-2"  # the second training model of the two-model check
#: NVIDIA A100 datasheet / Ampere architecture whitepaper: 108 SMs enabled on the GA100 of an A100
A100_SMS = 108
#: NVIDIA A100 datasheet: the SXM4 80GB's peak memory bandwidth (HBM2e), bytes/s
A100_80GB_PEAK_BW = 2.039e12
#: NVIDIA A100 datasheet: dense FP16/BF16 tensor-core peak, FLOP/s
A100_PEAK_FLOPS = 312e12
#: Decode GEMMs: the token counts whose cost is the weights' read (batch 1 to 4)
GEMV_MAX_M = 4


@dataclasses.dataclass(frozen=True)
class Gpu:
    """The card the timings come from: its SM count (the tile/wave term) and datasheet peaks
    (the fractions printed by ``--datasheet``)."""

    label: str = "A100-80GB"
    sms: int = A100_SMS
    peak_bw: float = A100_80GB_PEAK_BW
    peak_flops: float = A100_PEAK_FLOPS

    @property
    def tiles(self) -> GemmTiles:
        return GemmTiles(sm_count=self.sms)

    @property
    def regimes(self) -> GemmTiles:
        return GemmTiles(sm_count=self.sms, regimes=CUBLAS_REGIMES)


A100 = Gpu()


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


def print_floor(by_model: dict[str, list[dict]], gpu: Gpu = A100) -> None:
    """Per model: the tile form (the training model's tile) fitted to each (n, k) shape alone, its
    in-sample MAPE over the model's timings: the best any shared parameters could do."""
    tile = fit_params("gemm", by_model[TRAIN], gpu.tiles)
    one = GemmTiles(sm_count=gpu.sms, candidates=((int(tile["tile_m"]), int(tile["tile_n"])),))
    print(f"error floor (the tile form, tile {one.candidates[0][0]}x{one.candidates[0][1]}, fitted per shape)")
    for model, recs in sorted(by_model.items()):
        shapes: dict[tuple, list[dict]] = {}
        for r in recs:
            shapes.setdefault((r["n"], r["k"]), []).append(r)
        total = sum(mape(fit_params("gemm", rs, one), "gemm", rs) * len(rs) for rs in shapes.values())
        print(f"  {model:<40} {len(shapes):3d} shapes  floor {total / len(recs):6.2%}")


def print_lomo(by_model: dict[str, list[dict]], gpu: Gpu = A100) -> dict[str, float]:
    """Leave one model out: each model predicted by the form fitted on the other models' timings;
    returns the mean MAPE per form."""
    print("leave one model out (fitted on the other models, analytic form)")
    means = {}
    for label, tiles in (("tiles", gpu.tiles), ("regimes", gpu.regimes)):
        errs = []
        for held in sorted(by_model):
            train = [r for model, recs in by_model.items() if model != held for r in recs]
            errs.append(mape(fit_params("gemm", train, tiles), "gemm", by_model[held]))
            print(f"  {label:<7} {held:<40} {errs[-1]:6.2%}")
        means[label] = sum(errs) / len(errs)
    print(f"  mean over the {len(by_model)} models: " + ", ".join(f"{k} {v:.2%}" for k, v in means.items()))
    return means


def gemv_fit(recs: list[dict]) -> tuple[float, float, float]:
    """(t0 s, bandwidth bytes/s, MAPE) of t = t0 + bytes / bandwidth over ``recs``, least
    squares on relative error; bytes: fp16 weights plus the m-row input and output."""
    nbytes = np.array([2.0 * (r["n"] * r["k"] + r["m"] * (r["n"] + r["k"])) for r in recs])
    t = np.array([r["time_s"] for r in recs])
    a = np.vstack([np.ones_like(nbytes), nbytes]).T / t[:, None]
    (t0, per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(t0), float(1.0 / per_byte), float(np.mean(np.abs(a @ (t0, per_byte) - 1.0)))


def print_datasheet(by_model: dict[str, list[dict]], gpu: Gpu = A100) -> None:
    """The weight-read bandwidth of decode GEMMs (m <= GEMV_MAX_M), pooled and per model, and
    the datasheet form fitted on the training model (module docstring)."""
    small = {model: [r for r in recs if r["m"] <= GEMV_MAX_M] for model, recs in sorted(by_model.items())}
    small = {model: recs for model, recs in small.items() if len(recs) >= 2}
    print(f"decode GEMMs (m <= {GEMV_MAX_M}): t = t0 + bytes / bandwidth "
          f"(fraction of the {gpu.label}'s {gpu.peak_bw / 1e9:,.0f} GB/s)")
    for label, recs in (("all models", [r for rs in small.values() for r in rs]), *small.items()):
        t0, bw, err = gemv_fit(recs)
        print(f"  {label:<40} {len(recs):4d} timings  t0 {t0 * 1e6:5.2f} us  {bw / 1e9:6,.0f} GB/s "
              f"({bw / gpu.peak_bw:.3f})  MAPE {err:5.2%}")
    p = fit_params("gemm", by_model[TRAIN])  # the smooth roofline: sim/cost/datasheet.py's GEMM form
    print(f"datasheet form fitted on {TRAIN}: {p['flops_per_s'] / 1e12:.1f} TFLOP/s (eff_max "
          f"{p['flops_per_s'] / gpu.peak_flops:.3f} of {gpu.peak_flops / 1e12:.0f}), m_half {p['x_half']:.1f}, "
          f"sharpness {p['sharpness']:.2f}")


def print_held_out(by_model: dict[str, list[dict]], trained_on: tuple[str, ...], gpu: Gpu = A100) -> dict[str, float]:
    """Fit the three forms on ``trained_on``'s timings and print every model's MAPE; returns the
    mean over the held-out models per form."""
    recs = [r for model in trained_on for r in by_model[model]]
    forms = {"old": fit_kernel("gemm", recs, grid=False, folds=0),
             "tiles": fit_kernel("gemm", recs, grid=False, folds=0, tiles=gpu.tiles),
             "regimes": fit_kernel("gemm", recs, grid=False, folds=0, tiles=gpu.regimes)}
    print(f"fit on {' + '.join(trained_on)} ({len(recs)} timings):")
    for label, f in forms.items():
        print(f"  {label:<7} {describe(f)}")
    print(f"  {'predicted model (analytic form)':<40} {'timings':>7}" + "".join(f"  {k:>7}" for k in forms))
    held = []
    for model, model_recs in sorted(by_model.items()):
        errs = [mape(f.params, "gemm", model_recs) for f in forms.values()]
        if model not in trained_on:
            held.append(errs)
        tag = "  (training)" if model in trained_on else "  <- target" if model == HELD_OUT else ""
        print(f"  {model:<40} {len(model_recs):7d}" + "".join(f"  {e:7.2%}" for e in errs) + tag)
    means = {k: sum(e[i] for e in held) / max(1, len(held)) for i, k in enumerate(forms)}
    print(f"  {f'mean over the {len(held)} held-out models':<40} {'':>7}" + "".join(f"  {e:7.2%}" for e in means.values()))
    return means


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--write", action="store_true", help="write calibrations/a100-vidur-linear.yaml")
    ap.add_argument("--floor", action="store_true", help="print the per-shape in-sample error floor first")
    ap.add_argument("--datasheet", action="store_true",
                    help="print the numbers the A100 datasheet calibrations take from these timings first")
    ap.add_argument("--lomo", action="store_true",
                    help="also leave one model out: fit on the other seven, predict it (one tile and regimes)")
    ap.add_argument("--sms", type=int, default=A100.sms, help="the GPU's SM count (default: the A100's 108)")
    ap.add_argument("--peak-bw", type=float, default=A100.peak_bw, help="datasheet memory bandwidth, bytes/s")
    ap.add_argument("--peak-flops", type=float, default=A100.peak_flops, help="datasheet fp16 dense peak, FLOP/s")
    ap.add_argument("--label", default=A100.label, help="the GPU's name in the printout")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    gpu = Gpu(args.label, args.sms, args.peak_bw, args.peak_flops)
    if args.write and gpu != A100:
        ap.error("--write stores the A100 data's fit; it takes no --sms/--peak-bw/--peak-flops/--label")
    by_model = load(args.csv)
    if TRAIN not in by_model:
        ap.error(f"{args.csv}: no timings of the training model {TRAIN}")
    if args.datasheet:
        print_datasheet(by_model, gpu)
    if args.floor:
        print_floor(by_model, gpu)
    for trained_on in ((TRAIN,), (TRAIN, SECOND)):
        if all(model in by_model for model in trained_on):
            print_held_out(by_model, trained_on, gpu)
    if args.lomo:
        print_lomo(by_model, gpu)
    if gpu != A100:
        print(f"wall time {time.perf_counter() - start:.0f} s")
        return 0
    everything = [r for recs in by_model.values() for r in recs]
    base = load_calibration("a100-80gb")
    device = {"name": "a100-vidur-linear", "gpu_name": "NVIDIA A100 (Vidur profiling data)",
              "memory_bytes": base.memory_bytes, "provenance": {
                  "date": dt.date.today().isoformat(), "data": "microsoft/vidur data/profiling/compute/a100/*/mlp.csv "
                  "(MIT license), via shared/gpu-timings/a100_linear_layers.csv; fp16, CUDA events, median",
                  "measured": "gemm only (QKV, O, gate_up, down of 8 models, TP 1-8)",
                  "not_measured": "memory, PCIe, copies, attention, norms, step overhead: a100-80gb datasheet",
                  "command": "python benchmarks/microbench_a100_gemm.py --write", "schema": "2",
                  "measurements": "shared/gpu-timings/a100_linear_layers.csv (not copied; 36,516 rows)",
                  "sm_count": f"{A100_SMS} (NVIDIA A100 datasheet); gemm tile/wave term and kernel regimes, "
                              "sim/calib/gemm_tiles.py"}}
    cal = fit(everything, device=device, base=base, name="a100-vidur-linear", gemm_tiles=A100.regimes)
    cal = dataclasses.replace(cal, interconnect=base.interconnect, provenance={
        **cal.provenance, "interconnect": "not measured: the a100-80gb datasheet calibration's interconnect "
        "section (see its provenance)"})
    print(f"fit on all {len(everything)} timings (regimes form):\n  {describe(cal.kernels['gemm'])}")
    if args.write:
        out = ROOT / "calibrations" / "a100-vidur-linear.yaml"
        out.write_text("# kvsim calibration, schema 2: GEMM fitted on the Vidur A100 linear-layer timings;\n"
                       "# every other number is the a100-80gb datasheet's (see provenance).\n"
                       + yaml.safe_dump(calibration_to_dict(cal), sort_keys=False, width=120))
        print(f"wrote {out}")
    print(f"wall time {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

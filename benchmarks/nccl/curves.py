"""NCCL all-reduce time curves per GPU count from Vidur's published torch.distributed profiles.

`vidur_a100_dgx.csv` and `vidur_h100_dgx.csv` hold the rows of Microsoft Vidur's network profiles
(microsoft/vidur @ e26eb8f, data/profiling/network/{a100,h100}_dgx/all_reduce.csv, MIT license) whose
ranks all sit on one DGX node (devices_per_node == num_workers: 2, 4 or 8 GPUs): one process per GPU,
``torch.distributed.all_reduce`` of fp16 tensors (NCCL), ``size`` in bytes, times in milliseconds
(min / max / mean / median over the profiler's repeats).

The profiles step the message size finely (8 KiB at the small end, 32 KiB and more above 1 MiB).
Below about 2 MiB the rows jump between two levels 20-40 us apart from one size to the next (the
8-GPU rows' low level is nccl-tests' time at 8 GPUs, the high one is not; a profiled kernel's time
includes waiting for a late rank), so the curves start at 2 MiB, where every count's rows rise
smoothly; kvsim extends a curve below its first point along its first two points' line, down to the
calibration's all-reduce latency (sim/calib/allreduce_curve.py). The time at each power-of-two size
S from 2 MiB is the median of the medians of the rows within S / 1.19 .. S x 1.19 (a quarter of an
octave each way, narrower where the rows end). This script prints those curves per GPU count in the calibration's
``allreduce_curve`` form, and each count's ratio to a calibration's curve where it has one:

    python benchmarks/nccl/curves.py                       # the curves
    python benchmarks/nccl/curves.py --gpu a100 --compare a100-80gb   # against a calibration's curves
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from sim.calib.calibration import load_calibration  # noqa: E402

FILES = {"a100": HERE / "vidur_a100_dgx.csv", "h100": HERE / "vidur_h100_dgx.csv"}
SIZES = tuple(2 ** k for k in range(21, 29))  # 2 MiB .. 256 MiB, where the rows reach
WINDOW = 2 ** 0.25


def rows(path: Path) -> list[tuple[int, int, float]]:
    """(GPUs, bytes, median seconds) of the rows on one node."""
    out = []
    with path.open() as f:
        for r in csv.DictReader(f):
            n, dev = int(r["num_workers"]), int(r["devices_per_node"])
            if n == dev:
                out.append((n, int(r["size"]), float(r["time_stats.all_reduce.median"]) * 1e-3))
    return out


def curve(data: list[tuple[int, int, float]], num_gpus: int) -> list[list[float]]:
    """[[bytes, seconds], ...] at the power-of-two sizes the rows cover."""
    points, largest = [], max(b for n, b, _ in data if n == num_gpus)
    for s in SIZES:
        w = min(WINDOW, largest / s)  # as wide below S as above it: the largest size ends the window
        near = [t for n, b, t in data if n == num_gpus and s / w <= b <= s * w]
        if near:
            points.append([s, float(f"{statistics.median(near):.4g}")])
    return points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", choices=sorted(FILES), default=None, help="one profile (default: both)")
    ap.add_argument("--compare", metavar="CALIBRATION", help="a calibration whose curves to compare against")
    args = ap.parse_args(argv)
    if args.compare and not args.gpu:
        ap.error("--compare needs --gpu: the profile to hold the calibration against")
    ic = load_calibration(args.compare).interconnect if args.compare else None
    for gpu in [args.gpu] if args.gpu else sorted(FILES):
        data = rows(FILES[gpu])
        for n in sorted({n for n, _, _ in data}):
            pts = curve(data, n)
            print(f"{gpu} {n} GPUs ({sum(1 for m, _, _ in data if m == n)} rows):")
            print("  allreduce_curve: [" + ", ".join(f"[{b}, {t:.4e}]" for b, t in pts) + "]")
            if args.compare:
                mine = ic.numbers(n).allreduce_curve if ic else None
                if mine is None:
                    print(f"  {args.compare}: no curve at {n} GPUs")
                    continue
                ratios = [mine.seconds(b, ic.allreduce_s_per_byte(n)) / t for b, t in pts]
                print(f"  {args.compare} / Vidur: " + " ".join(f"{r:.2f}" for r in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Held-out-model GEMM error measured in one session on the GPU at hand.

The held-out check of ``benchmarks/microbench_a100_gemm.py`` runs on published A100 timings
that were taken model by model, in separate sessions: identical shapes timed for two models
differ there by 1.5-3% (RESULTS.md, "Microbench fits"), an error no model form can remove.
This script times the same eight models' linear layers (QKV, O, gate_up, down at tensor
parallel 1, 2, 4 and 8; 78 distinct weight shapes) with cuBLAS (``torch.matmul``, fp16) over a
grid of token counts in one session on one GPU, writes them in that CSV's format, and runs
the same analysis on them with this GPU's SM count and datasheet peaks: the form fitted on
Llama-3-8B predicting the seven other models, leave-one-model-out, and the decode GEMMs'
weight-read bandwidth (m <= 4: what a datasheet calibration's ``bandwidth_efficiency``
stands for).

Timing: ``microbench.timing.time_cuda`` (``triton.testing.do_bench``: L2 flushed before each
launch, CUDA events, median) on inputs rotated over more than twice the L2, as ``microbench
calibrate`` times its GEMMs. Token counts are measured in two passes (every other count of the
grid first), each pass over every shape, so that a run cut short by ``--budget-s`` still
covers every model. On a CPU (``--device cpu``, the tests) the same path runs the torch CPU
matmul with ``time_cpu``. Next to the CSV, ``<out>.device.json`` records the device (name,
SM count, memory, L2), the versions, the date and whether the grid was finished; ``--analyze
CSV`` runs the analysis later, on another machine, from those two files (the lent GPU's time
is then spent measuring only: ``benchmarks/gpu_session.sh`` does that).

    python benchmarks/gemm_models_gpu.py --out linear_layers.csv [--device cuda:0] [--budget-s 150]
        [--max-m 4096] [--models NAME,...] [--m 1,8,64] [--datasheet h200] [--no-analysis]
    python benchmarks/gemm_models_gpu.py --analyze linear_layers.csv [--datasheet h200]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

#: The published CSV's columns; here ``min_ms`` and ``max_ms`` hold the 20th and 80th percentiles.
FIELDS = ("gpu", "model", "op", "num_tokens", "tp", "m", "n", "k", "dtype", "median_ms", "min_ms", "max_ms")


@dataclass(frozen=True)
class Dims:
    """A model's linear-layer dimensions (its Hugging Face config.json)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    gated: bool = True  # gate and up projections fused (SwiGLU); phi-2's MLP has one fc1
    tps: tuple[int, ...] = (1, 2, 4, 8)


#: The eight models of the published A100 timings, with their tensor-parallel degrees.
MODELS: dict[str, Dims] = {
    "meta-llama/Meta-Llama-3-8B": Dims(4096, 32, 8, 128, 14336),
    "meta-llama/Llama-2-7b-hf": Dims(4096, 32, 32, 128, 11008),
    "meta-llama/Llama-2-70b-hf": Dims(8192, 64, 8, 128, 28672),
    "meta-llama/Meta-Llama-3-70B": Dims(8192, 64, 8, 128, 28672),
    "codellama/CodeLlama-34b-Instruct-hf": Dims(8192, 64, 8, 128, 22016),
    "Qwen/Qwen-72B": Dims(8192, 64, 64, 128, 24576),
    "internlm/internlm-20b": Dims(5120, 40, 40, 128, 13824),
    "microsoft/phi-2": Dims(2560, 32, 32, 80, 10240, gated=False, tps=(1,)),
}


def shapes(dims: Dims) -> list[tuple[str, int, int, int]]:
    """(op, tp, n, k) of every linear layer: weight [n, k], column-parallel ops split n, row-parallel k."""
    out = []
    for tp in dims.tps:
        q, kv = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
        up = dims.intermediate * (2 if dims.gated else 1)
        out += [("qkv_proj", tp, (q + 2 * kv) // tp, dims.hidden), ("o_proj", tp, dims.hidden, q // tp),
                ("gate_up_proj", tp, up // tp, dims.hidden), ("down_proj", tp, dims.hidden, dims.intermediate // tp)]
    return out


def m_grid(max_m: int) -> list[int]:
    """Token counts: 1, 2, 4, then steps of 8 to 256, 64 to 1,024, 256 beyond (up to ``max_m``)."""
    grid = [1, 2, 4, *range(8, 257, 8), *range(320, 1025, 64), *range(1280, max_m + 1, 256)]
    return [m for m in grid if m <= max_m]


def passes(grid: list[int]) -> list[list[int]]:
    """Every other token count first, then the rest: a cut-short run still spans the grid."""
    return [grid[0::2], grid[1::2]]


def measure(device_name: str, models: list[str], grid: list[int], out: Path, *, budget_s: float,
            dtype: str = "fp16", log=print) -> int:
    """Time every (model shape, m) into ``out`` (flushed row by row); returns the row count."""
    import torch  # noqa: PLC0415

    from microbench.cases import input_bytes, make_fns  # noqa: PLC0415
    from microbench.timing import cpu_cache_bytes, rotation_copies, time_cpu, time_cuda  # noqa: PLC0415

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    info = {"device": device_name, "torch": torch.__version__, "python": platform.python_version(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "dtype": dtype,
            "models": models, "grid": grid, "budget_s": budget_s, "timing": "microbench.timing.time_cuda "
            "(triton do_bench, L2 flushed, warmup 2 ms, rep 10 ms, median), inputs rotated over > 2x L2"
            if cuda else "microbench.timing.time_cpu, median of 3"}
    if cuda:
        import triton  # noqa: PLC0415

        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        gpu, cache = props.name, getattr(props, "L2_cache_size", 0) or 50 << 20
        info.update(gpu_name=props.name, sm_count=props.multi_processor_count, memory_bytes=props.total_memory,
                    l2_bytes=cache, cuda=torch.version.cuda, triton=triton.__version__)
    else:
        gpu, cache = "cpu", cpu_cache_bytes()
        info.update(gpu_name="cpu", cache_bytes=cache)
    start, rows = time.perf_counter(), 0
    sidecar = device_json(out)
    sidecar.write_text(json.dumps({**info, "complete": False}, indent=1))
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for ms in passes(grid):
            for m in ms:
                for model in models:
                    for op, tp, n, k in shapes(MODELS[model]):
                        if time.perf_counter() - start > budget_s:
                            log(f"budget of {budget_s:.0f} s spent: {rows} timings written to {out}")
                            sidecar.write_text(json.dumps({**info, "complete": False, "rows": rows}, indent=1))
                            return rows
                        shape = {"m": m, "n": n, "k": k, "dtype": dtype}
                        fns = make_fns("gemm", shape, device, rotation_copies(input_bytes("gemm", shape), cache))
                        t = time_cuda(fns, warmup_ms=2, rep_ms=10) if cuda else \
                            time_cpu(fns, warmup=1, min_repeats=3, min_time_s=0.0, max_repeats=3)
                        del fns
                        w.writerow((gpu, model, op, m, tp, m, n, k, dtype, f"{t.median_s * 1e3:.6g}",
                                    f"{t.p20_s * 1e3:.6g}", f"{t.p80_s * 1e3:.6g}"))
                        f.flush()
                        rows += 1
    log(f"{rows} timings written to {out} in {time.perf_counter() - start:.0f} s")
    sidecar.write_text(json.dumps({**info, "complete": True, "rows": rows}, indent=1))
    return rows


def device_json(csv_path: Path) -> Path:
    """The device record written next to a measured CSV."""
    return csv_path.with_name(csv_path.name + ".device.json")


def datasheet_for(gpu_name: str, memory_bytes: int) -> str | None:
    """The shipped datasheet calibration of a CUDA device's name, or None."""
    name = gpu_name.lower()
    if "h200" in name:
        return "h200"
    if "h100" in name:
        return "h100-pcie" if "pcie" in name else "h100-nvl" if "nvl" in name else "h100-sxm"
    if "a100" in name:
        return "a100-80gb" if memory_bytes > 60 << 30 else "a100-40gb"
    return None


def analysis_args(csv_path: Path, datasheet: str | None = None) -> list[str]:
    """``microbench_a100_gemm.py`` arguments for a measured CSV, from its device record: the SM
    count (the tile/wave term) and the datasheet calibration whose peaks the fractions use."""
    from sim.calib.calibration import load_calibration  # noqa: PLC0415

    info = json.loads(device_json(csv_path).read_text())
    args = ["--csv", str(csv_path), "--lomo", "--label", str(info.get("gpu_name", "?"))]
    if info.get("sm_count"):
        args += ["--sms", str(info["sm_count"])]
    datasheet = datasheet or datasheet_for(str(info.get("gpu_name", "")), int(info.get("memory_bytes", 0)))
    if datasheet:
        cal = load_calibration(datasheet)
        args += ["--datasheet", "--peak-bw", f"{cal.hbm_bandwidth_bytes_per_s:g}", "--peak-flops", f"{cal.peak_flops:g}"]
    return args


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", type=Path, help="measure into this CSV (then analyse it)")
    what.add_argument("--analyze", type=Path, metavar="CSV", help="only analyse a CSV measured before")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop measuring after this many seconds")
    ap.add_argument("--max-m", type=int, default=4096)
    ap.add_argument("--m", help="explicit token counts, comma-separated (instead of the grid)")
    ap.add_argument("--models", help="comma-separated subset of: " + ", ".join(MODELS))
    ap.add_argument("--datasheet", help="calibration whose peaks the fractions use (default: by the GPU's name)")
    ap.add_argument("--no-analysis", action="store_true", help="only measure")
    args = ap.parse_args(argv)
    models = args.models.split(",") if args.models else list(MODELS)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)}; allowed: {', '.join(MODELS)}")
    try:
        grid = sorted({int(x) for x in args.m.split(",")}) if args.m else m_grid(args.max_m)
    except ValueError:
        ap.error(f"--m: comma-separated positive integers, not {args.m!r}")
    if not grid or grid[0] < 1:
        ap.error("--m / --max-m: token counts must be >= 1")
    if args.out:
        measure(args.device, models, grid, args.out, budget_s=args.budget_s)
        if args.no_analysis:
            return 0
    path = args.out or args.analyze
    if not path.is_file() or not device_json(path).is_file():
        ap.error(f"--analyze: {path} and its {device_json(path).name} must both exist (written by --out)")
    import microbench_a100_gemm  # noqa: PLC0415

    return microbench_a100_gemm.main(analysis_args(path, args.datasheet))


if __name__ == "__main__":
    sys.exit(main())

"""The peak suite of ``microbench calibrate``: the achieved dense GEMM peak per math mode
and the weight-only int8 dequantisation cost, and their fit into a calibration's
``compute_peaks`` and ``dequant`` sections (sim/calib/precision.py).

Records (JSONL, as the other kernels'; not kernel models, so ``microbench predict`` has no
form for them):

- ``{"kernel": "gemm_peak", "m": 4096, "n": 4096, "k": 4096, "mode": "bf16", "time_s": ...}``:
  one large GEMM in math mode ``mode`` (a ``compute_peaks`` key), 2mnk FLOPs (OPs for int8);
- ``{"kernel": "weight_only_gemv", "m": 1, "n": 8192, "k": 8192, "dtype": "int8", "time_s": ...}``:
  a decode GEMV whose weights are ``dtype`` (int8: dequantised inside the kernel; bf16: the
  reference it is compared with).

What runs, each mode only where a one-call trial on the device succeeds (else a one-line note):

- ``bf16``, ``fp16``: torch.matmul (fp32 accumulate);
- ``fp16-acc16``: torch.matmul under ``torch.backends.cuda.matmul.allow_fp16_accumulation``
  (cuBLAS CUBLAS_COMPUTE_16F), CUDA only, and only where the flag changes the result of a trial
  GEMM (proof that fp16 accumulation ran). ``allow_fp16_reduced_precision_reduction`` is not
  fp16 accumulation (it only permits reduced-precision split-k reductions) and is not used;
- ``fp8``: torch._scaled_mm on float8_e4m3fn inputs (bf16 out, per-tensor scales,
  use_fast_accum), CUDA with compute capability >= 8.9 only (torch runs it on the CPU too,
  but as an emulation, not a math mode of the device);
- ``int8``: torch._int_mm (int32 accumulate), on CUDA and on the CPU where it runs;
- weight-only int8: torch._weight_int8pack_mm (a fused dequantising GEMV) against a bf16
  torch.matmul GEMV of the same shape, CUDA only (on the CPU both are host code, not a GPU's
  fused dequant kernel); skipped where the fused op is missing (an unfused dequant-then-matmul
  would understate a real weight-only kernel several times over).

The fit writes the best achieved 2mnk / time per mode (an achieved peak, not the
datasheet's); the cost model uses only the ratios to ``bf16`` (peak_flops x
compute_peaks[mode] / compute_peaks.bf16), so bf16 is always written (``peak_flops``, the
fitted GEMM throughput, when bf16 itself was not measured). ``dequant.int8`` is
t_bf16 / (2 t_int8): the int8 kernel's weight bytes per second over the bf16 GEMV's, median
over shapes, at most 1.
"""

from __future__ import annotations

import statistics

from sim.calib.precision import COMPUTE_MODES, PEAK_RANGE, Precision

#: the extra record kinds and their shape fields (microbench.records checks them)
PEAK_KERNELS = {"gemm_peak": ("m", "n", "k", "mode"), "weight_only_gemv": ("m", "n", "k", "dtype")}
#: square GEMM sizes per device (the CPU's small: its reference paths are slow; same cost with --quick)
PEAK_SIZES = {"cuda": (4096, 8192), "cpu": (256, 512)}
GEMV_SHAPES = {"cuda": ((1, 4096, 4096), (1, 8192, 8192), (16, 8192, 8192)), "cpu": ()}
_TRIAL = 64  # m = n = k of the capability trial (int8 on CUDA needs m > 16, n and k multiples of 8)


def gemm_peak_fn(torch, mode: str, m: int, n: int, k: int, device, gen):
    """A callable doing one m x n x k GEMM in math mode ``mode`` (weights [n, k] as nn.Linear)."""
    if mode in ("bf16", "fp16", "fp16-acc16"):
        dtype = torch.bfloat16 if mode == "bf16" else torch.float16
        a = torch.randn(m, k, device=device, dtype=dtype, generator=gen)
        b = torch.randn(n, k, device=device, dtype=dtype, generator=gen).t()
        if mode != "fp16-acc16":
            return lambda: torch.matmul(a, b)
        flags = torch.backends.cuda.matmul

        def acc16():
            before = flags.allow_fp16_accumulation
            flags.allow_fp16_accumulation = True
            try:
                return torch.matmul(a, b)
            finally:
                flags.allow_fp16_accumulation = before

        return acc16
    if mode == "fp8":
        fp8 = torch.float8_e4m3fn
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=gen).to(fp8)
        b = torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=gen).to(fp8).t()  # column-major
        one = torch.ones((), device=device, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
    if mode == "int8":
        a = torch.randint(-128, 128, (m, k), device=device, dtype=torch.int8, generator=gen)
        b = torch.randint(-128, 128, (n, k), device=device, dtype=torch.int8, generator=gen).t()
        return lambda: torch._int_mm(a, b)
    raise ValueError(f"gemm_peak: no math mode {mode!r}")


def weight_only_fn(torch, dtype: str, m: int, n: int, k: int, device, gen):
    """A decode GEMV x [m, k] @ W[n, k]^T with ``dtype`` weights (int8: per-row scales, dequantised in the kernel)."""
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=gen)
    if dtype == "bf16":
        w = torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=gen)
        return lambda: torch.matmul(x, w.t())
    w8 = torch.randint(-128, 128, (n, k), device=device, dtype=torch.int8, generator=gen)
    scales = torch.rand(n, device=device, dtype=torch.bfloat16, generator=gen) + 0.5
    return lambda: torch._weight_int8pack_mm(x, w8, scales)


def make_peak_fn(torch, kernel: str, shape: dict, device, gen):
    """The callable of one peak-suite record (microbench.cases dispatches here)."""
    if kernel == "gemm_peak":
        return gemm_peak_fn(torch, shape["mode"], shape["m"], shape["n"], shape["k"], device, gen)
    return weight_only_fn(torch, shape["dtype"], shape["m"], shape["n"], shape["k"], device, gen)


def _trial(torch, device, fn) -> str | None:
    """None if ``fn`` runs on ``device``, else its error in one line."""
    try:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001  (any failure means: not supported here)
        text = (str(exc).strip().splitlines() or [""])[0][:160]
        return f"{type(exc).__name__}: {text}"
    return None


def _why_not(torch, device, mode: str, gen) -> str | None:
    """None if ``mode`` can be measured on ``device``, else why not (one line)."""
    cuda = device.type == "cuda"
    if mode == "fp4":  # NVFP4 needs block-scaled operands (swizzled E4M3 scales per 16): no plain torch call
        return "fp4 (NVFP4) GEMMs are not measured by microbench; the datasheet's peak stays"
    if mode == "fp16-acc16":
        if not cuda:
            return "fp16 accumulation is a CUDA (cuBLAS) mode"
        if not hasattr(torch.backends.cuda.matmul, "allow_fp16_accumulation"):
            return f"torch {torch.__version__} has no torch.backends.cuda.matmul.allow_fp16_accumulation"
    if mode == "fp8":
        if not cuda:
            return "fp8 GEMMs are measured on CUDA only (compute capability >= 8.9)"
        cc = torch.cuda.get_device_capability(device)
        if cc < (8, 9):
            return f"needs compute capability >= 8.9, this GPU has {cc[0]}.{cc[1]}"
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return f"torch {torch.__version__} has no float8_e4m3fn or _scaled_mm"
    if mode == "int8" and not hasattr(torch, "_int_mm"):
        return f"torch {torch.__version__} has no _int_mm"
    fn = gemm_peak_fn(torch, mode, _TRIAL, _TRIAL, _TRIAL, device, gen)
    failed = _trial(torch, device, fn)
    if failed or mode != "fp16-acc16":
        return failed
    plain = gemm_peak_fn(torch, "fp16", _TRIAL, _TRIAL, 4096, device, torch.Generator(device=device).manual_seed(1))
    acc16 = gemm_peak_fn(torch, mode, _TRIAL, _TRIAL, 4096, device, torch.Generator(device=device).manual_seed(1))
    if torch.equal(plain(), acc16()):
        return "allow_fp16_accumulation did not change a GEMM's result here (fp16 accumulation did not run)"
    return None


def peak_support(torch, device) -> tuple[list[str], bool, list[str]]:
    """(math modes to measure, whether to measure weight-only int8, one-line notes on what is skipped)."""
    gen = torch.Generator(device=device).manual_seed(0)
    modes, notes = [], []
    for mode in COMPUTE_MODES:
        why = _why_not(torch, device, mode, gen)
        if why is None:
            modes.append(mode)
        else:
            notes.append(f"compute peak {mode}: skipped ({why})")
    dequant = device.type == "cuda"
    if not dequant:
        notes.append("dequant int8: skipped (weight-only GEMVs are measured on CUDA only)")
    elif not hasattr(torch, "_weight_int8pack_mm"):
        dequant = False
        notes.append(f"dequant int8: skipped (torch {torch.__version__} has no _weight_int8pack_mm)")
    elif why := _trial(torch, device, weight_only_fn(torch, "int8", 1, _TRIAL, _TRIAL, device, gen)):
        dequant = False
        notes.append(f"dequant int8: skipped (torch._weight_int8pack_mm fails on {device}: {why})")
    return modes, dequant, notes


def peak_cases(device_type: str, modes: list[str], dequant: bool) -> list[tuple[str, dict]]:
    """The (kernel, shape) cases of the peak suite."""
    out = [("gemm_peak", dict(m=s, n=s, k=s, mode=mode)) for mode in modes for s in PEAK_SIZES[device_type]]
    if dequant:
        out += [("weight_only_gemv", dict(m=m, n=n, k=k, dtype=d))
                for m, n, k in GEMV_SHAPES[device_type] for d in ("bf16", "int8")]
    return out


def fit_precision(records: list[dict], *, peak_flops: float, file: str) -> tuple[Precision | None, dict[str, str]]:
    """The ``compute_peaks`` and ``dequant`` sections measured by ``records`` (None: neither
    measured) and provenance lines saying how."""
    best: dict[str, float] = {}
    sizes: dict[str, set] = {}
    for r in records:
        if r["kernel"] == "gemm_peak":
            rate = 2.0 * r["m"] * r["n"] * r["k"] / r["time_s"]
            if PEAK_RANGE[0] <= rate <= PEAK_RANGE[1] and rate > best.get(r["mode"], 0.0):
                best[r["mode"]] = rate
            sizes.setdefault(r["mode"], set()).add(f"{r['m']}x{r['n']}x{r['k']}")
    prov: dict[str, str] = {}
    peaks = {"bf16": peak_flops}
    if best:
        peaks.update({mode: best[mode] for mode in COMPUTE_MODES if mode in best})
        prov["compute_peaks"] = ("achieved, not the datasheet's: the best 2mnk / time of microbench's GEMM per "
                                 "math mode (" + "; ".join(f"{m}: {', '.join(sorted(sizes[m]))}" for m in best) + ")"
                                 + ("" if "bf16" in best else "; bf16 not measured: peak_flops"))
    dequant, source = _fit_dequant(records)
    if not best and dequant is None:
        return None, {}
    return Precision(file=file, compute_peaks=peaks, dequant=dequant, dequant_source=source,
                     has_compute_peaks=bool(best)), prov


def _fit_dequant(records: list[dict]) -> tuple[dict[str, float] | None, str | None]:
    times: dict[tuple, dict[str, list[float]]] = {}
    for r in records:
        if r["kernel"] == "weight_only_gemv":
            times.setdefault((r["m"], r["n"], r["k"]), {}).setdefault(r["dtype"], []).append(r["time_s"])
    ratios = {shape: statistics.median(t["bf16"]) / (2.0 * statistics.median(t["int8"]))
              for shape, t in times.items() if t.get("bf16") and t.get("int8")}
    if not ratios:
        return None, None
    value = min(1.0, statistics.median(ratios.values()))
    shapes = ", ".join(f"{m}x{n}x{k}" for m, n, k in sorted(ratios))
    return {"int8": float(f"{value:.4g}")}, (
        f"measured by microbench: int8 weight-only GEMV (torch._weight_int8pack_mm) against a bf16 GEMV, "
        f"weight bytes per second ratio, median over m x n x k {shapes}, at most 1")


def describe_precision(p: Precision | None) -> str | None:
    """One line: the achieved peaks (TFLOP/s) and dequant fractions, or None."""
    if p is None:
        return None
    parts = []
    if p.has_compute_peaks:
        parts.append("achieved " + ", ".join(f"{m} {v / 1e12:.3g}" for m, v in p.compute_peaks.items())
                     + " TFLOP/s")
    if p.dequant:
        parts.append("dequant " + ", ".join(f"{d} {v:.2f}" for d, v in p.dequant.items()))
    return f"{'compute peaks':<18}  " + "; ".join(parts)

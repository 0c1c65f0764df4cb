"""Checks of microbench's input, all made before any timing starts, and the absurd-fit warning.

Every bad flag or file ends in one ConfigError line (``error: <cli>: --flag: ...``, exit 2):
argparse's own errors too (sim.errors.OneLineParser). ``--out`` is probed for writing before the minutes
of measuring, so that the measurements are never lost to an unusable path.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

from sim.errors import ConfigError

DEVICE_RE = re.compile(r"(cpu|cuda)(:\d+)?")
ABSURD_CV_MAPE = 0.5  # a cross-validated error above this: the timings are noise, not a kernel's cost
#: The most memory bandwidth a fitted kernel may claim, bytes/s: a CPU socket's DRAM reaches a few
#: hundred GB/s (its caches more, on a few cores far less than this); the fastest GPU memory, B300's
#: HBM3e, 8 TB/s. A fit past it has timed something else (caches on tiny shapes, a skipped kernel).
MAX_FITTED_BANDWIDTH = {"cpu": 2e12, "gpu": 1.2e13}
MEASURED_DIR = "calibrations-measured"  # calibrate's default output folder (not the tracked calibrations/)


def check_calibrate_flags(args) -> None:
    """The flags of ``microbench calibrate`` that need no torch: device syntax, threads, --out."""
    if args.gpu is not None and args.gpu < 0:
        raise ConfigError("<cli>", "--gpu", f"expected a CUDA device index >= 0, got {args.gpu}")
    if args.device is not None and not DEVICE_RE.fullmatch(args.device):
        raise ConfigError("<cli>", "--device", f"got {args.device!r}; allowed: cpu, cuda, cuda:N (or --gpu N)")
    if args.threads is not None and args.threads < 1:
        raise ConfigError("<cli>", "--threads", f"expected a number of CPU threads >= 1, got {args.threads}")
    if args.out is not None:
        check_output(Path(args.out), "--out", also=(".jsonl",))


def check_output(path: Path, flag: str, *, also: tuple[str, ...] = ()) -> None:
    """``path`` (a .yaml) and its siblings with the suffixes ``also`` can be written: creates the
    folder and probes it with a temporary file."""
    if "\0" in str(path):
        raise ConfigError("<cli>", flag, f"{str(path)!r}: a file name cannot hold a NUL byte")
    if path.is_dir():
        raise ConfigError("<cli>", flag, f"{path} is a directory; give a calibration file, e.g. {path}/my-gpu.yaml")
    if path.suffix not in (".yaml", ".yml"):
        raise ConfigError("<cli>", flag, f"{str(path)!r}: expected a calibration file name ending in .yaml")
    try:
        for target in (path, *(path.with_suffix(s) for s in also)):
            if target.is_dir():
                raise ConfigError("<cli>", flag, f"{target} is a directory; give another calibration file name")
            if target.exists() and not target.is_file():
                raise ConfigError("<cli>", flag, f"{target} exists and is not a regular file")
            if target.exists() and not os.access(target, os.W_OK):
                raise ConfigError("<cli>", flag, f"cannot write {target}: permission denied")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".microbench-probe-"):
            pass
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError("<cli>", flag, f"cannot write {path}: {why}") from None


def import_torch():
    """torch, or one error line saying how to install it."""
    try:
        import torch  # noqa: PLC0415
    except ImportError as exc:
        raise ConfigError("<cli>", "calibrate", f"needs torch, which cannot be imported here ({exc}); install it "
                          "with pip install 'kvsim[gpu]' (on a GPU machine, the torch build for your driver "
                          "first)") from None
    return torch


def check_device(torch, device_arg: str, flag: str):
    """The torch.device of ``device_arg``, present on this machine, or one error line."""
    device = torch.device(device_arg)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("<cli>", flag, f"{device_arg}: no CUDA device here (torch {torch.__version__}, "
                              f"CUDA {torch.version.cuda or 'not built in'}); use --device cpu, or a CUDA "
                              "build of torch on a machine with a GPU")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError("<cli>", flag, f"no CUDA device {device.index}; this machine has {count} "
                              f"(indices 0-{count - 1})")
    return device


def absurd_fits(cal) -> list[tuple[str, float]]:
    """(kernel or ``composition``, cross-validated MAPE) of the fits whose error is over ABSURD_CV_MAPE."""
    errors = [(k, f.cv_mape) for k, f in cal.kernels.items()]
    if cal.composition is not None:
        errors.append(("composition", cal.composition.cv_mape))
    return [(k, e) for k, e in errors if e is not None and e > ABSURD_CV_MAPE]


def unphysical_fits(cal) -> list[tuple[str, float]]:
    """(kernel, fitted bandwidth) of the fits claiming more memory bandwidth than the device can have."""
    kind = "cpu" if str(cal.gpu_name).upper().startswith("CPU") else "gpu"
    out = []
    for name, fit in cal.kernels.items():
        if name == "step":  # its form's "bandwidth" prices the step's own bytes, not a memory's rate
            continue
        bw = (fit.params if hasattr(fit, "params") else {}).get("bandwidth_bytes_per_s")
        if bw is not None and bw > MAX_FITTED_BANDWIDTH[kind]:
            out.append((name, float(bw)))
    return out


def warn_absurd_fits(cal, written: Path, *, stream=None) -> list[tuple[str, float]]:
    """Print a loud warning on stderr naming the absurd fits (noise, or outside physics); returns them."""
    for name, bw in unphysical_fits(cal):
        print(f"WARNING: the {name} fit claims {bw / 1e12:.1f} TB/s of memory bandwidth, more than a "
              f"{'CPU' if str(cal.gpu_name).upper().startswith('CPU') else 'GPU'} has: its timings measured "
              f"something else (caches on small shapes, a kernel that did not run); {written} was written "
              "anyway, but do not trust it: re-run microbench calibrate without --quick, on a quiet machine.",
              file=stream or sys.stderr)
    bad = absurd_fits(cal)
    if bad:
        names = ", ".join(f"{k} {e:.0%}" for k, e in bad)
        print(f"WARNING: {len(bad)} fit(s) with an absurd cross-validated error (MAPE > {ABSURD_CV_MAPE:.0%}): "
              f"{names}. These timings are noise, not the kernels' cost (a busy or throttling machine?); "
              f"{written} was written anyway, but do not trust it: re-run microbench calibrate on a quiet "
              "machine (on a CPU: --threads 1, nothing else running).", file=stream or sys.stderr)
    return bad


def check_fitted(cal, *, measurements: str) -> None:
    """The fitted calibration reads back (sim's ranges): else one error line blaming the measurements."""
    from sim.calib.calibration import calibration_from_dict, calibration_to_dict  # noqa: PLC0415

    try:
        calibration_from_dict(calibration_to_dict(cal), file=measurements)
    except ConfigError as exc:
        raise ConfigError(measurements, exc.key, f"the fitted calibration is unusable: {exc.message}; these "
                          "timings are implausible for a device (check them, or re-measure)") from None

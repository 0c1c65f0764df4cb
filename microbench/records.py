"""Raw measurements: one JSON object per line (JSONL), read back and validated.

Schema (documented in docs/reference/calibrations.md, "Measurements (JSONL)"):

- measurement records: ``{"kernel": "gemm", "m": 128, "n": 4096, "k": 4096, "dtype": "bf16",
  "time_s": 1.2e-05, ...}``: ``kernel`` (a name in sim.calib.kernel_models.KERNELS), that kernel's
  shape fields, ``time_s`` (median seconds of one launch, > 0); ``kernel: forward`` records
  time a whole engine step instead (fields: sim.calib.composition.FORWARD_FIELDS); optional ``p20_s``,
  ``p80_s``, ``repeats``, ``impl`` and ``source`` (kept, not used by the fit); ``kernel:
  gemm_peak`` and ``weight_only_gemv`` records time the peak suite (microbench.peaks: fields
  m, n, k and ``mode``, a compute_peaks math mode, or ``dtype``).
- at most one device record, usually first: ``{"record": "device", "name": ..., "gpu_name":
  ..., "memory_bytes": ..., "provenance": {...}}``; it lets ``microbench fit`` write a whole
  calibration without ``--base``.

Lines that are empty or start with ``#`` are skipped. Errors are ConfigError(file,
``line N.field``, ...). A file over MAX_JSONL_BYTES or MAX_RECORDS records is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from microbench.peaks import PEAK_KERNELS
from sim.calib.composition import FORWARD_FIELDS
from sim.calib.precision import COMPUTE_MODES
from sim.errors import ConfigError, unlink_symlink
from sim.calib.kernel_models import KERNELS
from sim.model.dtypes import DTYPE_BYTES

Record = dict
MAX_JSONL_BYTES = 64 << 20
MAX_RECORDS = 200_000
#: the largest shape field (tokens, sizes, bytes): past it a kernel's bytes and FLOPs overflow the fit
#: (a dimension of 1e308 once ended in scipy's "Residuals are not finite")
MAX_FIELD = 1e13


def _number(v) -> float | None:
    """``v`` as a finite float, or None (not a number, a boolean, too large, NaN or infinite)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def check_field(name: str, v, *, file: str, key: str) -> None:
    """One shape field: ``dtype`` a known dtype, ``mode`` a math mode, ``pinned`` a boolean, the rest
    finite numbers >= 0."""
    if name == "mode":
        if not isinstance(v, str) or v not in COMPUTE_MODES:
            raise ConfigError(file, key, f"got {v!r}"[:200] + f"; allowed: {', '.join(COMPUTE_MODES)}")
    elif name == "dtype":
        if not isinstance(v, str) or v not in DTYPE_BYTES:
            raise ConfigError(file, key, f"got {v!r}; allowed: {', '.join(DTYPE_BYTES)}")
    elif name == "pinned":
        if not isinstance(v, bool):
            raise ConfigError(file, key, f"expected true or false, got {v!r}")
    elif (x := _number(v)) is None or x < 0 or x > MAX_FIELD:
        raise ConfigError(file, key, f"expected a number in [0, {MAX_FIELD:.0e}], got {v!r}"[:300])


def check_record(rec, *, file: str, where: str) -> Record:
    """Validate one measurement record; returns it unchanged."""
    if not isinstance(rec, dict):
        raise ConfigError(file, where, "expected a JSON object")
    kernel = rec.get("kernel")
    if not isinstance(kernel, str) or (kernel not in KERNELS and kernel != "forward" and kernel not in PEAK_KERNELS):
        raise ConfigError(file, f"{where}.kernel", f"got {kernel!r}"[:200] + f"; allowed: {', '.join(KERNELS)}, "
                          f"forward, {', '.join(PEAK_KERNELS)}")
    t = _number(rec.get("time_s"))
    if t is None or not 0 < t < 1e6:
        raise ConfigError(file, f"{where}.time_s", f"expected seconds in (0, 1e6), got {rec.get('time_s')!r}"[:300])
    fields = FORWARD_FIELDS if kernel == "forward" else PEAK_KERNELS.get(kernel) or KERNELS[kernel].fields
    if kernel == "forward" and not isinstance(rec.get("tie_word_embeddings", False), bool):
        raise ConfigError(file, f"{where}.tie_word_embeddings",
                          f"expected true or false, got {rec['tie_word_embeddings']!r}")
    idle = rec.get("idle_s", 0.0)
    if kernel == "forward" and ((x := _number(idle)) is None or x < 0):
        raise ConfigError(file, f"{where}.idle_s", f"expected seconds >= 0, got {idle!r}"[:300])
    for name in fields:
        check_field(name, rec.get(name), file=file, key=f"{where}.{name}")
    return rec


def check_device_record(rec: dict, *, file: str, where: str) -> dict:
    """The device record's ``name``, ``gpu_name`` (text), ``memory_bytes`` (> 0) and ``provenance`` (a mapping)."""
    for key in ("name", "gpu_name"):
        if key in rec and (not isinstance(rec[key], str) or not rec[key].strip()):
            raise ConfigError(file, f"{where}.{key}", f"expected a non-empty string, got {rec[key]!r}"[:300])
    mem = rec.get("memory_bytes", 1)
    if (x := _number(mem)) is None or x < 1 or not x.is_integer():
        raise ConfigError(file, f"{where}.memory_bytes", f"expected an integer number of bytes > 0, got {mem!r}"[:300])
    if not isinstance(rec.get("provenance", {}), dict):
        raise ConfigError(file, f"{where}.provenance", "expected a mapping of key: text")
    return rec


def read_jsonl(path: str | Path) -> tuple[list[Record], dict | None]:
    """(measurement records, the device record or None) of a JSONL file."""
    file = str(path)
    try:
        size = Path(path).stat().st_size
        if not Path(path).is_file():
            raise ConfigError(file, "<root>", "cannot read measurements: not a regular file")
        if size > MAX_JSONL_BYTES:
            raise ConfigError(file, "<root>", f"cannot read measurements: {size:,} bytes, more than the "
                              f"{MAX_JSONL_BYTES:,} allowed (fit a subset)")
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(file, "<root>", f"cannot read measurements: {exc}") from None
    records, device = [], None
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as exc:  # ValueError: JSONDecodeError, an int of > 4300 digits
            raise ConfigError(file, f"line {i}", f"not JSON: {getattr(exc, 'msg', None) or exc}"[:300]) from None
        if isinstance(rec, dict) and rec.get("record") == "device":
            if device is not None:
                raise ConfigError(file, f"line {i}", "a second device record; at most one per file")
            device = check_device_record(rec, file=file, where=f"line {i}")
            continue
        records.append(check_record(rec, file=file, where=f"line {i}"))
        if len(records) > MAX_RECORDS:
            raise ConfigError(file, f"line {i}", f"more than {MAX_RECORDS} measurement records; fit a subset")
    if not records:
        raise ConfigError(file, "<root>", "no measurement records")
    return records, device


def write_jsonl(path: str | Path, records: list[Record], device: dict | None = None) -> None:
    """Write ``device`` (if any) then ``records``, one per line."""
    unlink_symlink(path)
    with open(path, "w", encoding="utf-8") as f:
        if device is not None:
            f.write(json.dumps({"record": "device", **device}) + "\n")
        for rec in records:
            f.write(json.dumps(rec) + "\n")

"""Raw measurements: one JSON object per line (JSONL), read back and validated.

Schema (documented in README.md, "Calibrations"):

- measurement records: ``{"kernel": "gemm", "m": 128, "n": 4096, "k": 4096, "dtype": "bf16",
  "time_s": 1.2e-05, ...}``: ``kernel`` (a name in sim.calib.kernel_models.KERNELS), that kernel's
  shape fields, ``time_s`` (median seconds of one launch, > 0); ``kernel: forward`` records
  time a whole engine step instead (fields: sim.calib.composition.FORWARD_FIELDS); optional ``p20_s``,
  ``p80_s``, ``repeats``, ``impl`` and ``source`` (kept, not used by the fit).
- at most one device record, usually first: ``{"record": "device", "name": ..., "gpu_name":
  ..., "memory_bytes": ..., "provenance": {...}}``; it lets ``microbench fit`` write a whole
  calibration without ``--base``.

Lines that are empty or start with ``#`` are skipped. Errors are ConfigError(file,
``line N.field``, ...).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sim.calib.composition import FORWARD_FIELDS
from sim.errors import ConfigError
from sim.calib.kernel_models import KERNELS
from sim.model.dtypes import DTYPE_BYTES

Record = dict


def check_record(rec, *, file: str, where: str) -> Record:
    """Validate one measurement record; returns it unchanged."""
    if not isinstance(rec, dict):
        raise ConfigError(file, where, "expected a JSON object")
    kernel = rec.get("kernel")
    if kernel not in KERNELS and kernel != "forward":
        raise ConfigError(file, f"{where}.kernel", f"got {kernel!r}; allowed: {', '.join(KERNELS)}, forward")
    t = rec.get("time_s")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        raise ConfigError(file, f"{where}.time_s", f"expected seconds > 0, got {t!r}")
    fields = FORWARD_FIELDS if kernel == "forward" else KERNELS[kernel].fields
    if kernel == "forward" and not isinstance(rec.get("tie_word_embeddings", False), bool):
        raise ConfigError(file, f"{where}.tie_word_embeddings",
                          f"expected true or false, got {rec['tie_word_embeddings']!r}")
    idle = rec.get("idle_s", 0.0)
    if kernel == "forward" and (isinstance(idle, bool) or not isinstance(idle, (int, float)) or not idle >= 0):
        raise ConfigError(file, f"{where}.idle_s", f"expected seconds >= 0, got {idle!r}")
    for name in fields:
        v = rec.get(name)
        if name == "dtype":
            if v not in DTYPE_BYTES:
                raise ConfigError(file, f"{where}.dtype", f"got {v!r}; allowed: {', '.join(DTYPE_BYTES)}")
        elif name == "pinned":
            if not isinstance(v, bool):
                raise ConfigError(file, f"{where}.pinned", f"expected true or false, got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v):
            raise ConfigError(file, f"{where}.{name}", f"expected a number >= 0, got {v!r}")
    return rec


def read_jsonl(path: str | Path) -> tuple[list[Record], dict | None]:
    """(measurement records, the device record or None) of a JSONL file."""
    file = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(file, "<root>", f"cannot read measurements: {exc}") from None
    records, device = [], None
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(file, f"line {i}", f"not JSON: {exc.msg}") from None
        if isinstance(rec, dict) and rec.get("record") == "device":
            device = rec
            continue
        records.append(check_record(rec, file=file, where=f"line {i}"))
    if not records:
        raise ConfigError(file, "<root>", "no measurement records")
    return records, device


def write_jsonl(path: str | Path, records: list[Record], device: dict | None = None) -> None:
    """Write ``device`` (if any) then ``records``, one per line."""
    with open(path, "w", encoding="utf-8") as f:
        if device is not None:
            f.write(json.dumps({"record": "device", **device}) + "\n")
        for rec in records:
            f.write(json.dumps(rec) + "\n")

"""The register of fitted constants (fits.yaml): what each was fitted on, checked against the code.

kvsim's factors that no datasheet states (engine profiles' host times, the tinygemm int4
fraction, the MoE layer's fixed time, the runtime memory overheads, the datasheet GEMM's ridge
sharpness, the datasheet calibrations' efficiencies and interconnect figures) were fitted or
chosen on data. A figure on the published suite's ``test`` split (split.yaml) is held out only
if no constant behind it saw a test case. So every such group of constants is listed in
fits.yaml with a fingerprint of its current values and the history of its fits (date, script,
data). tests/benchmarks_published/test_fits.py fails when

* a group's values changed and fits.yaml was not updated (its fingerprint no longer matches):
  a refit, or a hand edit, must say what it was fitted on;
* a fit dated after the split was frozen (2026-12-06) names data other than ``train`` (the
  suite's train side, ``split.train_ids()``) or ``external`` (data outside the suite, named in
  its ``source``): no constant may be fitted on the test side.

    python benchmarks/published/fits.py          # each group's fingerprint: recorded and current

After a refit, add an entry to the group's ``fits`` and paste the printed fingerprint.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from datetime import date
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FITS_YAML = Path(__file__).resolve().parent / "fits.yaml"
#: The day split.yaml was frozen: a fit made after it reads only the train side.
FROZEN = date(2026, 12, 6)
#: What a fit may have read: all published cases (only before FROZEN), the train side, or data
#: from outside the suite.
DATA = ("all", "train", "external")
#: Calibration keys that hold fitted or chosen factors (the rest are datasheet figures or text).
CALIBRATION_KEYS = ("bandwidth_efficiency", "compute_efficiency", "kernel_launch_s", "step_overhead_s",
                    "dequant", "mode_efficiency", "interconnect", "gemm_fixed_s")


def _canonical(value):
    """A JSON-able form of a constant: dataclasses by their fields, enums by value, floats by repr."""
    import dataclasses
    import enum

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items() if k != "source"}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float):
        return repr(value)
    return value


def _calibration_values(pattern: str) -> dict:
    """The fitted keys of the calibrations matching ``pattern`` (under calibrations/), per file."""
    out = {}
    for path in sorted((ROOT / "calibrations").glob(pattern)):
        data = yaml.safe_load(path.read_text())
        if data.get("source") != "datasheet":
            continue
        out[path.name] = {k: data[k] for k in CALIBRATION_KEYS if k in data}
    return out


def current_values(group: dict):
    """The values a group names: ``module:attribute`` objects, or ``calibrations/<glob>``. With
    ``fields``, a dict of dataclasses (``PROFILES``) counts only those fields of each."""
    values = {}
    for name in group["constants"]:
        if name.startswith("calibrations/"):
            values[name] = _calibration_values(name.removeprefix("calibrations/"))
            continue
        module, attr = name.split(":")
        value = getattr(importlib.import_module(module), attr)
        if group.get("fields"):
            value = {k: {f: getattr(v, f) for f in group["fields"]} for k, v in value.items()}
        values[name] = value
    return values


def fingerprint(group: dict) -> str:
    """SHA-256 (first 16 hex digits) of the group's values in canonical JSON."""
    text = json.dumps(_canonical(current_values(group)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_register(path: Path = FITS_YAML) -> dict:
    return yaml.safe_load(path.read_text())["groups"]


def problems(register: dict) -> list[str]:
    """What is wrong with the register against the code; empty when it is true."""
    out = []
    for name, group in register.items():
        now = fingerprint(group)
        if group["fingerprint"] != now:
            out.append(f"{name}: the values of {', '.join(group['constants'])} changed (fingerprint {now}, "
                       f"fits.yaml records {group['fingerprint']}): add the fit to its 'fits' (date, script, "
                       f"data: train or external) and set fingerprint: {now}")
        for fit in group["fits"]:
            day = fit["date"] if isinstance(fit["date"], date) else date.fromisoformat(str(fit["date"]))
            if fit["data"] not in DATA:
                out.append(f"{name}: fit of {day}: data {fit['data']!r}; allowed: {', '.join(DATA)}")
            elif day > FROZEN and fit["data"] == "all":
                out.append(f"{name}: fit of {day} read all published cases, test side included; after "
                           f"{FROZEN} a fit reads only train (split.train_ids()) or external data")
            if fit["data"] == "external" and not fit.get("source"):
                out.append(f"{name}: fit of {day}: data 'external' needs a 'source' naming it")
    return out


def main() -> int:
    register = load_register()
    for name, group in register.items():
        now = fingerprint(group)
        mark = "ok" if now == group["fingerprint"] else "CHANGED"
        print(f"{name}: recorded {group['fingerprint']}, current {now} ({mark})")
    found = problems(register)
    for p in found:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

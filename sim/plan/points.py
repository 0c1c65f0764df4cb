"""A plan's point files: one per finished configuration, so ``sim plan --resume`` runs
only the others.

Layout::

    DIR/configs/<index>.json   {"fingerprint", "record"}: the configuration's search
                               record (sim/plan/search.py), written atomically the moment
                               it finishes; <index> is its place in the space (0000, ...)

The fingerprint is a hash of everything a record depends on: the SLO, the search
settings, the searched keys and every configuration's values and full scenario mapping
(so an edit of the scenario file the plan names counts too). Prices, the name and the
description are left out: costs are recomputed from the records on every run. ``--resume``
refuses (one ``error:`` line) a folder whose point files carry another fingerprint: the
plan changed since, and its points would be stale. A point file that cannot be read, is
not JSON or lacks a key is refused likewise (delete it to rerun its configuration).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

from sim.errors import ConfigError
from sim.outputs.files import write_atomic
from sim.plan.spec import PlanSpec

CONFIGS_DIR = "configs"
_NAME = re.compile(r"^\d{4,}\.json$")
_RECORD_KEYS = ("index", "values", "status", "reason", "memory", "max_rate", "capped", "at_max_rate",
                "start_rate", "reused_from", "num_probes", "probes")
_STATUSES = ("feasible", "slo-unreachable", "infeasible", "error")


def fingerprint(spec: PlanSpec) -> str:
    doc = {"slo": dataclasses.asdict(spec.slo), "search": dataclasses.asdict(spec.search), "keys": list(spec.keys),
           "configs": [[c.index, c.values, c.data] for c in spec.configs]}
    text = json.dumps(doc, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def configs_dir(out_dir: Path) -> Path:
    return Path(out_dir) / CONFIGS_DIR


def point_path(out_dir: Path, index: int) -> Path:
    return configs_dir(out_dir) / f"{index:04d}.json"


def point_files(out_dir: Path) -> list[Path]:
    folder = configs_dir(out_dir)
    return sorted(p for p in folder.iterdir() if _NAME.match(p.name)) if folder.is_dir() else []


def save_point(out_dir: Path, fp: str, record: dict) -> None:
    write_atomic(point_path(out_dir, record["index"]), json.dumps({"fingerprint": fp, "record": record}) + "\n")


def remove_points(out_dir: Path) -> None:
    """``--force``: the earlier plan's point files go (other files in the folder stay)."""
    for path in point_files(out_dir):
        path.unlink(missing_ok=True)


def _bad(path: Path, key: str, what: str):
    raise ConfigError(str(path), key, f"{what}; delete it to rerun its configuration")


def load_points(out_dir: Path, spec: PlanSpec, fp: str) -> dict[int, dict]:
    """Finished records by configuration index; ConfigError for a stale or malformed file."""
    found = {}
    for path in point_files(out_dir):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            _bad(path, "<file>", f"cannot read it ({getattr(exc, 'strerror', None) or exc})")
        except ValueError as exc:
            _bad(path, "<json>", f"not valid JSON ({exc})")
        if not isinstance(doc, dict) or "fingerprint" not in doc or not isinstance(doc.get("record"), dict):
            _bad(path, "<top>", "expected an object with fingerprint and record")
        if doc["fingerprint"] != fp:
            raise ConfigError(str(path), "fingerprint", f"computed for another plan ({doc['fingerprint']}; this plan "
                              f"is {fp}): the plan or its scenario changed since. Rerun with --force (without "
                              "--resume) to start over, or use another --out")
        rec = doc["record"]
        for key in _RECORD_KEYS:
            if key not in rec:
                _bad(path, f"record.{key}", "required key is missing")
        index = int(path.stem)
        if rec["index"] != index or index >= len(spec.configs):
            _bad(path, "record.index", f"{rec['index']!r} does not match the file name or the plan")
        if rec["values"] != spec.configs[index].values:
            _bad(path, "record.values", "not this configuration's values")
        if rec["status"] not in _STATUSES:
            _bad(path, "record.status", f"got {rec['status']!r}, expected one of {', '.join(_STATUSES)}")
        found[index] = rec
    return found

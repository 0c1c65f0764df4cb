"""The files a sweep point reads, and their content hashes (part of the point's id).

A point reads its model's config.json (when ``model`` is a path), its calibration YAML
(``gpu``: a path, or a name looked up in ``calibrations/``), and every ``path`` under
``workload`` (a trace, an empirical length distribution's CSV). They resolve as the
simulator resolves them (``sim.config.paths``, ``sim.model.hf_config.config_file``), from the
raw scenario mapping, so that an invalid point gets an id too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from sim.calib.calibration import calibration_file
from sim.config.paths import file_or_name, resolve_in
from sim.model.hf_config import config_file


def _model_file(base: Path, ref) -> Path | None:
    return config_file(file_or_name(base, ref)) if isinstance(ref, str) else None


def _calibration_file(base: Path, ref) -> Path | None:
    if not isinstance(ref, str):
        return None
    try:
        return calibration_file(file_or_name(base, ref))
    except (OSError, ValueError):
        return None


def _workload_paths(base: Path, node) -> list[Path]:
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "path" and isinstance(value, str):
                path = resolve_in(base, value)
                if path.is_file():
                    found.append(path)
            else:
                found += _workload_paths(base, value)
    elif isinstance(node, list):
        for value in node:
            found += _workload_paths(base, value)
    return found


def input_files(data: dict, scenario_path: str) -> dict[str, Path]:
    """The files a point with scenario mapping ``data`` reads, by role (``model``, ``gpu``,
    ``workload...path``); files that do not exist are left out (validation reports them)."""
    base = Path(scenario_path).resolve().parent
    files = {"model": _model_file(base, data.get("model")), "gpu": _calibration_file(base, data.get("gpu", "a100-80gb"))}
    for i, path in enumerate(_workload_paths(base, data.get("workload"))):
        files[f"workload.{i}"] = path
    return {role: path for role, path in files.items() if path is not None}


class FileDigests:
    """SHA-256 of files' content, each file read once per sweep (points share a trace)."""

    def __init__(self) -> None:
        self._cache: dict[Path, str] = {}

    def digest(self, path: Path) -> str:
        key = path.resolve()
        if key not in self._cache:
            h = hashlib.sha256()
            with open(key, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            self._cache[key] = h.hexdigest()
        return self._cache[key]

    def of(self, data: dict, scenario_path: str) -> dict[str, str]:
        """Role -> content hash of every file the point reads."""
        out = {}
        for role, path in input_files(data, scenario_path).items():
            try:
                out[role] = self.digest(path)
            except OSError:
                continue
        return out

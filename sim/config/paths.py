"""How paths in a scenario resolve: relative to the scenario file's folder. One rule for the
simulator (``Scenario.resolve``, ``sim.engine.parts.relative_to_scenario``) and for the files a
sweep point hashes (``sim.sweep.inputs``), which work from a raw, maybe invalid, mapping."""

from __future__ import annotations

from pathlib import Path


def resolve_in(base: Path, path: str) -> Path:
    """``path`` as written in a scenario whose folder is ``base``."""
    p = Path(path)
    return p if p.is_absolute() else base / p


def file_or_name(base: Path, ref: str) -> str:
    """A reference that may be a file or a name (``model``, ``gpu``): the file's path when it
    looks like one and exists beside the scenario, else ``ref`` unchanged (a name)."""
    path = resolve_in(base, ref)
    return str(path) if ("/" in ref or ref.endswith((".json", ".yaml", ".yml"))) and path.exists() else ref

"""The scenarios kvsim ships, found by name: ``sim run chatbot`` (or ``chatbot.yaml``, or the
README's ``scenarios/chatbot.yaml`` from a folder that has no such file) runs the shipped
``scenarios/chatbot.yaml``, from an installed wheel (pyproject.toml maps the repository's
scenarios/ to ``sim/config/shipped_scenarios/``, traces and model configs with them) or from
the repository in a source checkout. A file that exists is always read as given."""

from __future__ import annotations

from pathlib import Path


def shipped_scenarios_dir() -> Path:
    here = Path(__file__).resolve().parent
    wheel = here / "shipped_scenarios"
    return wheel if wheel.is_dir() else here.parent.parent / "scenarios"


def available_scenarios() -> list[str]:
    d = shipped_scenarios_dir()
    return sorted(p.stem for p in d.glob("*.yaml") if p.is_file()) if d.is_dir() else []


def shipped_scenario(arg: str | Path) -> Path | None:
    """The shipped scenario ``arg`` names when no file ``arg`` exists: ``NAME``, ``NAME.yaml`` or
    ``scenarios/NAME.yaml``; None otherwise. A folder of that name (``sim run chatbot`` where an
    earlier ``--out chatbot`` made one) does not hide the shipped scenario."""
    path = Path(arg)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        return None
    parts = path.parts
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "scenarios"):
        return None
    stem = path.name.removesuffix(".yaml")
    if not stem or stem.startswith("."):
        return None
    candidate = shipped_scenarios_dir() / f"{stem}.yaml"
    return candidate if candidate.is_file() else None


def resolve_scenario_path(arg: str | Path) -> Path:
    """``arg`` as a path, or the shipped scenario it names (``shipped_scenario``)."""
    return shipped_scenario(arg) or Path(arg)

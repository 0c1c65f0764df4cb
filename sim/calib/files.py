"""Where calibrations are found: by name in ./calibrations, then among the shipped ones (an
installed wheel's ``sim/calib/shipped/``, or the repository's calibrations/); re-exported by
sim.calib.calibration."""

from __future__ import annotations

from pathlib import Path


def shipped_calibrations_dir() -> Path:
    """The shipped calibrations: an installed wheel's ``sim/calib/shipped/`` (pyproject.toml maps
    the repository's calibrations/ there), else, in a source checkout or an editable install,
    the repository's top-level calibrations/."""
    here = Path(__file__).resolve().parent
    wheel = here / "shipped"
    return wheel if wheel.is_dir() else here.parent.parent / "calibrations"


def calibration_dirs() -> list[Path]:
    """Where names are looked up, in order: ./calibrations, then the shipped ones."""
    dirs = [Path.cwd() / "calibrations", shipped_calibrations_dir()]
    return dirs if dirs[0].resolve() != dirs[1].resolve() else dirs[:1]


def available_calibrations() -> list[str]:
    """Names (file stems) of the calibrations found in ``calibration_dirs()``, sorted, unique."""
    return sorted({p.stem for d in calibration_dirs() if d.is_dir() for p in d.glob("*.yaml") if p.is_file()})


def calibration_file(name_or_path: str) -> Path | None:
    """The YAML file a calibration name or path refers to (see load_calibration), or None."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    return next((p for p in (d / f"{name_or_path}.yaml" for d in calibration_dirs()) if p.is_file()), None)

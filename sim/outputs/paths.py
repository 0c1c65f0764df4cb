"""Checks on the paths a command writes to, before any work: the folder can be written (not a
read-only or pseudo file system), and a run's own subfolders are not links to elsewhere.
Re-exported by sim.outputs.files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.errors import ConfigError


def check_writable(target: Path, flag: str = "--out") -> None:
    """``target`` (a file or folder, existing or not) can be created or replaced: its
    nearest existing ancestor is a folder this process may write. Raises ConfigError."""
    target = Path(target)
    folder = target if target.is_dir() else target.parent
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ConfigError(str(target), flag, f"{folder} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK) or _read_only(folder) or not _can_create_in(folder):
        raise ConfigError(str(target), flag, f"cannot write in {folder} (permission denied or a "
                          "read-only file system); choose a writable path")


def refuse_linked_subfolder(folder: Path, flag: str = "--out") -> None:
    """A run's own subfolder (a sweep's points/, a plan's configs/) must be a folder inside
    --out, never a symlink to one elsewhere: its files would be written (and, with --force,
    removed) there."""
    folder = Path(folder)
    if folder.is_symlink():
        raise ConfigError(str(folder), flag, f"is a symlink to {os.readlink(folder)}: the run writes and removes "
                          f"its files inside --out only; remove the link (or move the folder back) and rerun")


def _can_create_in(folder: Path) -> bool:
    """Whether a folder can be made in ``folder`` (made and removed at once): a pseudo file
    system such as /proc passes the permission checks and still refuses every new entry."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".kvsim-probe-", dir=folder))
    except OSError:
        return False
    return True


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False

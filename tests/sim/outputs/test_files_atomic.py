"""write_atomic never follows a symlink (at its temporary path or at the target), leaves no
temporary file behind, even on failure; safe_name and prepare_out_dir."""

from __future__ import annotations

import os

import pytest

from sim.errors import ConfigError
from sim.outputs import files
from sim.outputs.files import prepare_out_dir, safe_name, write_atomic


def test_a_symlink_planted_at_the_old_temporary_path_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".summary.json.tmp").symlink_to(victim)
    write_atomic(out / "summary.json", "{}\n")
    assert victim.read_text() == "precious"
    assert (out / "summary.json").read_text() == "{}\n" and not (out / "summary.json").is_symlink()


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "summary.json").symlink_to(victim)
    write_atomic(tmp_path / "summary.json", "new")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "summary.json").is_symlink() and (tmp_path / "summary.json").read_text() == "new"


def test_temporary_names_are_unique_and_never_left_behind(tmp_path, monkeypatch):
    made = []
    real_mkstemp = files.tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, name = real_mkstemp(*args, **kwargs)
        made.append(name)
        return fd, name

    monkeypatch.setattr(files.tempfile, "mkstemp", spy)
    write_atomic(tmp_path / "a.csv", "1")
    write_atomic(tmp_path / "a.csv", "2")
    assert len(set(made)) == 2 and all(os.path.dirname(m) == str(tmp_path) for m in made)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv"]
    assert (tmp_path / "a.csv").stat().st_mode & 0o777 == 0o666 & ~files._umask()


@pytest.mark.parametrize("fail_at", ["write", "replace"])
def test_a_failed_write_leaves_no_temporary_file_and_the_old_file_intact(tmp_path, monkeypatch, fail_at):
    target = tmp_path / "summary.json"
    target.write_text("old")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if fail_at == "replace":
        monkeypatch.setattr(files.os, "replace", boom)
        text = "new"
    else:
        text = object()  # writing it raises (TypeError) after the temporary file exists
    with pytest.raises((OSError, TypeError)):
        write_atomic(target, text)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


@pytest.mark.parametrize("name, safe", [
    ("chatbot", "chatbot"), ("paged-throughput", "paged-throughput"), ("../../x", "x"),
    ("/etc/cron.d/x", "etc-cron.d-x"), ("..", "scenario"), ("", "scenario"), ("a\\b:c", "a-b-c"),
    ("v1.2_run+1", "v1.2_run+1"),
])
def test_safe_name(name, safe):
    assert safe_name(name) == safe
    assert "/" not in safe_name(name) and safe_name(name) not in (".", "..")


def test_prepare_out_dir(tmp_path):
    assert prepare_out_dir(tmp_path / "new" / "deeper", ["summary.json"], force=False) == []
    assert not (tmp_path / "new").exists()  # checking creates nothing
    (tmp_path / "old").mkdir()
    for name in ("summary.json", "report.html", "validation.json", "mine.txt"):
        (tmp_path / "old" / name).write_text("x")
    with pytest.raises(ConfigError, match="summary.json, report.html, validation.json"):
        prepare_out_dir(tmp_path / "old", ["summary.json"], force=False)
    stale = prepare_out_dir(tmp_path / "old", ["summary.json"], force=True)
    assert sorted(p.name for p in stale) == ["report.html", "validation.json"]
    (tmp_path / "old" / "steps.csv").mkdir()
    with pytest.raises(ConfigError, match="steps.csv: --out: is a folder"):
        prepare_out_dir(tmp_path / "old", ["summary.json", "steps.csv"], force=True)

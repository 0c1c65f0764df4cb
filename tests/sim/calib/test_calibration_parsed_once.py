"""A calibration file's text is parsed once (sim.errors.read_yaml_file_once): a run loads
its calibration twice, and each load must still see the file as it is and get its own copy."""

from __future__ import annotations

import shutil

import pytest

import sim.errors as errors
from sim.calib.calibration import calibration_file, load_calibration
from sim.errors import ConfigError


def test_parsed_once_each_call_its_own_copy(tmp_path, monkeypatch) -> None:
    path = tmp_path / "gpu.yaml"
    shutil.copy(calibration_file("a100-80gb"), path)
    parses = []
    real = errors.parse_yaml
    monkeypatch.setattr(errors, "parse_yaml", lambda text, file, key=None: parses.append(file) or real(text, file, key))
    first = errors.read_yaml_file_once(path)
    first["memory_bytes"] = 1  # a caller's change stays its own
    second = errors.read_yaml_file_once(path)
    assert len(parses) == 1 and second["memory_bytes"] != 1
    assert load_calibration(str(path)) == load_calibration(str(path)) and len(parses) == 1


def test_a_changed_file_is_read_again(tmp_path) -> None:
    path = tmp_path / "gpu.yaml"
    shutil.copy(calibration_file("a100-80gb"), path)
    before = load_calibration(str(path))
    text = path.read_text().replace(f"memory_bytes: {before.memory_bytes}", "memory_bytes: 1234567890", 1)
    assert text != path.read_text()
    path.write_text(text)  # at once: the cache keys on the text, not the clock
    assert load_calibration(str(path)).memory_bytes == 1234567890


def test_errors_are_raised_every_time(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("a: [1, 2\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="malformed YAML"):
            errors.read_yaml_file_once(path)
    with pytest.raises(ConfigError):
        errors.read_yaml_file_once(tmp_path / "missing.yaml")

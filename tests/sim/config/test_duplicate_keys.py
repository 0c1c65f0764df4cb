"""A YAML key written twice in one mapping is refused (YAML itself keeps the last, silently: issue #42)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.errors import ConfigError, parse_yaml

REPO = Path(__file__).resolve().parents[3]


def test_a_repeated_key_names_its_line_and_the_first() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_yaml("name: a\nengine:\n  max_model_len: 4096\n  max_model_len: 8192\n", "s.yaml")
    assert exc.value.key == "line 4" and "'max_model_len' appears twice" in exc.value.message
    assert "first at line 3" in exc.value.message


def test_the_same_key_in_different_mappings_and_merge_keys_are_fine() -> None:
    data = parse_yaml("a: {x: 1}\nb: {x: 2}\nbase: &b {y: 1}\nc:\n  <<: *b\n  z: 2\n", "s.yaml")
    assert data["a"]["x"] == 1 and data["b"]["x"] == 2 and data["c"] == {"y": 1, "z": 2}


def test_sim_run_on_a_scenario_with_a_repeated_key_exits_2_with_one_line(tmp_path: Path) -> None:
    text = (REPO / "scenarios" / "chatbot.yaml").read_text() + "\nmodel: qwen2.5-1.5b\n"
    scenario = tmp_path / "dup.yaml"
    scenario.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "sim.cli.main", "run", str(scenario), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(scenario) in lines[0] and "'model' appears twice" in lines[0]

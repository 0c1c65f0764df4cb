"""`pip install .` (not editable) ships what `sim run` needs: the calibrations and the model presets.

pyproject.toml lists the packages and maps the repository's calibrations/ into the wheel as
``sim.calib.shipped``; sim/calib/calibration.py looks there after ./calibrations. CI (.ci/run)
also installs the wheel into a fresh venv without torch and runs scenarios/chatbot.yaml.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools import find_namespace_packages

from sim.calib import calibration as calib
from sim.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "calibrations", "scenarios", "sim", "microbench", "kernels", "realengine",
           "validation")


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_the_package_list_matches_the_source_tree() -> None:
    """Every package with an __init__.py is listed (a new one must be added to pyproject.toml)."""
    found = {p for p in find_namespace_packages(str(REPO), include=["sim*", "microbench*", "kernels*",
                                                                    "realengine*", "validation*"])
             if (REPO / p.replace(".", "/") / "__init__.py").is_file()}
    listed = set(_setuptools()["packages"])
    assert found - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == {"sim.calib.shipped", "sim.config.shipped_scenarios"}
    assert _setuptools()["package-dir"] == {"sim.calib.shipped": "calibrations",
                                            "sim.config.shipped_scenarios": "scenarios"}


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    """The file list of a wheel built from a clean copy of the sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    (tmp / "src").mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, tmp / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, tmp / "src" / name)
    try:  # the venv's setuptools when it is recent enough (fast, offline); else pip's isolated build
        from importlib.metadata import version

        isolation = int(version("setuptools").split(".")[0]) < 68
    except Exception:  # noqa: BLE001
        isolation = True
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(tmp / "src")]
    proc = subprocess.run(cmd + ([] if isolation else ["--no-build-isolation"]), capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("kvsim-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def test_the_wheel_carries_the_calibrations_and_the_model_presets(wheel_names: set[str]) -> None:
    shipped = sorted(p.name for p in (REPO / "calibrations").iterdir() if p.suffix in (".yaml", ".jsonl"))
    assert "a100-80gb.yaml" in shipped and "cpu-epyc-2core.jsonl" in shipped
    assert {f"sim/calib/shipped/{name}" for name in shipped} <= wheel_names
    assert "sim/model/data/models.yaml" in wheel_names
    assert not any(n.startswith("calibrations/") for n in wheel_names)  # no top-level package of that name
    assert {"sim/cli/main.py", "microbench/cli.py", "kernels/__init__.py"} <= wheel_names


def test_the_wheel_carries_the_scenarios_with_their_traces_and_models(wheel_names: set[str]) -> None:
    """``sim run chatbot`` after ``pip install .``: every shipped scenario and what it reads."""
    names = sorted(p.name for p in (REPO / "scenarios").glob("*.yaml"))
    assert "chatbot.yaml" in names and "azure-conv.yaml" in names
    assert {f"sim/config/shipped_scenarios/{n}" for n in names} <= wheel_names
    traces = sorted(p.name for p in (REPO / "scenarios" / "traces").glob("*.csv"))
    assert traces and {f"sim/config/shipped_scenarios/traces/{n}" for n in traces} <= wheel_names
    assert "sim/config/shipped_scenarios/models/validate-llama/config.json" in wheel_names
    assert not any(n.startswith("scenarios/") for n in wheel_names)


def test_a_shipped_scenario_runs_by_name_from_any_folder(tmp_path: Path, monkeypatch, capsys) -> None:
    from sim.cli.main import main
    from sim.config.shipped import available_scenarios, shipped_scenario

    monkeypatch.chdir(tmp_path)
    assert {"chatbot", "azure-conv", "plan-chatbot"} <= set(available_scenarios())
    for arg in ("chatbot", "chatbot.yaml", "scenarios/chatbot.yaml"):
        assert shipped_scenario(arg) == REPO / "scenarios" / "chatbot.yaml"
    assert shipped_scenario("other/chatbot.yaml") is None and shipped_scenario("nope") is None
    (tmp_path / "chatbot.yaml").write_text("name: mine\n")  # a file that exists is read as given
    assert shipped_scenario("chatbot.yaml") is None
    assert main(["run", "azure-conv", "--set", "workload.num_requests=50", "--out", str(tmp_path / "o"),
                 "--no-report", "--quiet"]) == 0  # its trace comes along, relative to the shipped file
    assert main(["run", "no-such-scenario", "--out", str(tmp_path / "p")]) == 2
    assert "did you mean a shipped scenario?" in capsys.readouterr().err


def test_names_are_looked_up_in_cwd_then_in_the_shipped_ones(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    shipped = {p.stem for p in (REPO / "calibrations").glob("*.yaml")}
    assert calib.available_calibrations() == sorted(shipped)
    assert calib.calibration_file("a100-80gb") == REPO / "calibrations" / "a100-80gb.yaml"
    (tmp_path / "calibrations").mkdir()
    mine = tmp_path / "calibrations" / "a100-80gb.yaml"
    mine.write_text((REPO / "calibrations" / "a100-80gb.yaml").read_text())
    (tmp_path / "calibrations" / "my-gpu.yaml").write_text(mine.read_text())
    assert calib.calibration_file("a100-80gb") == tmp_path / "calibrations" / "a100-80gb.yaml"
    assert "my-gpu" in calib.available_calibrations()
    with pytest.raises(ConfigError, match=r"unknown GPU calibration 'nope'; use one of: a10, a100-40gb, a100-80gb"):
        calib.load_calibration("nope")


def test_an_empty_lookup_says_where_it_looked(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    import sim.calib.files as files  # where the lookup lives (sim.calib.calibration re-exports it)

    monkeypatch.setattr(files, "shipped_calibrations_dir", lambda: tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"use one of: \(none in .*calibrations or .*missing\)"):
        calib.load_calibration("a100-80gb")

"""The register of fitted constants (benchmarks/published/fits.py, fits.yaml) is true of the code,
and catches what it is for: a changed constant without a recorded fit, and a fit after the split
froze that read the test side."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import sys
from pathlib import Path

SUITE_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "published"


def _load():
    spec = importlib.util.spec_from_file_location("kvsim_fits", SUITE_DIR / "fits.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kvsim_fits"] = mod
    spec.loader.exec_module(mod)
    return mod


fits = _load()


def test_the_register_matches_the_code() -> None:
    assert fits.problems(fits.load_register()) == []


def test_every_group_names_constants_that_exist_and_a_fit() -> None:
    register = fits.load_register()
    assert {"engine_host_times", "datasheet_calibrations", "runtime_memory_overheads"} <= set(register)
    for name, group in register.items():
        assert group["fits"], name
        values = fits.current_values(group)
        assert all(v not in (None, {}) for v in values.values()), name


def test_a_changed_constant_fails_until_its_fit_is_recorded(monkeypatch) -> None:
    import sim.cost.profile as profile

    register = fits.load_register()
    before = fits.fingerprint(register["engine_host_times"])
    v1 = profile.PROFILES[profile.ProfileName.VLLM_V1]
    monkeypatch.setitem(profile.PROFILES, profile.ProfileName.VLLM_V1, dataclasses.replace(v1, step_host_s=0.7e-3))
    found = fits.problems(register)
    assert len(found) == 1 and found[0].startswith("engine_host_times: the values of sim.cost.profile:PROFILES changed")
    after = fits.fingerprint(register["engine_host_times"])
    assert after != before and after in found[0]
    # recorded: a fit on the train side after the freeze
    register["engine_host_times"]["fingerprint"] = after
    register["engine_host_times"]["fits"].append({"date": "2026-12-07", "script": "x", "data": "train"})
    assert fits.problems(register) == []


def test_a_field_outside_the_fitted_ones_does_not_count(monkeypatch) -> None:
    import sim.cost.profile as profile

    register = fits.load_register()
    v1 = profile.PROFILES[profile.ProfileName.VLLM_V1]
    monkeypatch.setitem(profile.PROFILES, profile.ProfileName.VLLM_V1, dataclasses.replace(v1, max_graph_size=64))
    assert fits.problems(register) == []


def test_a_calibration_edit_counts_but_its_text_does_not(tmp_path, monkeypatch) -> None:
    import shutil

    cal = tmp_path / "calibrations"
    shutil.copytree(fits.ROOT / "calibrations", cal)
    register = fits.load_register()
    monkeypatch.setattr(fits, "ROOT", tmp_path)
    assert fits.problems(register) == []
    text = (cal / "h100-sxm.yaml").read_text()
    (cal / "h100-sxm.yaml").write_text(text + "# a note\n")
    assert fits.problems(register) == []
    (cal / "h100-sxm.yaml").write_text(text.replace("  source: 'Hopper", "  source: 'Measured on Hopper", 1))
    assert fits.problems(register) == []
    (cal / "h100-sxm.yaml").write_text(text.replace("bandwidth_efficiency: 0.83", "bandwidth_efficiency: 0.85", 1))
    assert [p.split(":")[0] for p in fits.problems(register)] == ["datasheet_calibrations"]


def test_after_the_freeze_a_fit_reads_train_or_external_data_only() -> None:
    register = copy.deepcopy(fits.load_register())
    group = register["tinygemm_int4"]
    group["fits"].append({"date": "2026-12-08", "script": "x", "data": "all"})
    group["fits"].append({"date": "2026-12-09", "script": "x", "data": "test"})
    group["fits"].append({"date": "2026-12-10", "script": "x", "data": "external"})
    found = fits.problems(register)
    assert len(found) == 3
    assert "read all published cases, test side included" in found[0]
    assert "data 'test'; allowed: all, train, external" in found[1]
    assert "needs a 'source'" in found[2]
    group["fits"] = [{"date": "2026-12-01", "script": "x", "data": "all"}]  # before the freeze: allowed
    assert fits.problems(register) == []

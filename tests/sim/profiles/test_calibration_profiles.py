"""A calibration's ``profiles:`` section: the machine's host numbers for an engine profile."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.calib.calibration import calibration_to_dict, load_calibration
from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.engine.parts import build_parts
from sim.cost.profile import PROFILES, ProfileName

WORKLOAD = {"num_requests": 3, "arrival": {"type": "constant", "rate": 5.0},
            "prompt_tokens": {"type": "fixed", "value": 40}, "output_tokens": {"type": "fixed", "value": 5}}


def _calibration(tmp_path, profiles) -> str:
    data = calibration_to_dict(load_calibration("a100-80gb"))
    data["name"], data["profiles"] = "mine", profiles
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _parts(tmp_path, gpu, **engine):
    sc = parse_scenario({"model": "tiny-llama", "gpu": gpu, "engine": {"max_model_len": 256, **engine},
                         "workload": WORKLOAD}, str(tmp_path / "s.yaml"))
    return build_parts(sc)


def test_the_calibration_sets_the_machines_host_time_and_the_scenario_still_wins(tmp_path) -> None:
    gpu = _calibration(tmp_path, {"vllm-v1": {"step_host_s": 3.3e-3, "async_scheduling": True}})
    p = _parts(tmp_path, gpu).profile
    assert p.step_host_s == 3.3e-3 and p.async_scheduling
    p = _parts(tmp_path, gpu, profile_overrides={"step_host_s": 1e-3}).profile
    assert p.step_host_s == 1e-3 and p.async_scheduling  # the scenario's key over the machine's
    v0 = _parts(tmp_path, gpu, profile="vllm-v0").profile
    assert v0.step_host_s == PROFILES[ProfileName.VLLM_V0].step_host_s != 3.3e-3  # other profiles untouched
    assert load_calibration(gpu).profiles == {"vllm-v1": {"step_host_s": 3.3e-3, "async_scheduling": True}}


def test_the_summary_reports_the_profile_as_run(tmp_path) -> None:
    gpu = _calibration(tmp_path, {"vllm-v1": {"step_host_s": 4e-3}})
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"model": "tiny-llama", "gpu": gpu, "engine": {"max_model_len": 256},
                                    "workload": WORKLOAD}))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "--quiet", "--no-report"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["profile"]["profile"] == "vllm-v1" and summary["profile"]["step_host_s"] == 4e-3


@pytest.mark.parametrize("profiles, key", [
    ({"vllm-v9": {"step_host_s": 1e-3}}, "profiles.vllm-v9"),
    ({"vllm-v1": {"step_hots_s": 1e-3}}, "profiles.vllm-v1.step_hots_s"),
    ({"vllm-v1": {"step_host_s": -1}}, "profiles.vllm-v1.step_host_s"),
    ({"vllm-v1": {"step_host_s": "fast"}}, "profiles.vllm-v1.step_host_s"),
    ({"vllm-v1": {"async_scheduling": "yes"}}, "profiles.vllm-v1.async_scheduling"),
    ({"vllm-v1": {"graph_mode": "always"}}, "profiles.vllm-v1.graph_mode"),
    ({"vllm-v1": 3}, "profiles.vllm-v1"),
    ({"vllm-v1": {"gqa_shared_kv_reads": 0}}, "profiles.vllm-v1.gqa_shared_kv_reads"),
    ({"vllm-v1": {"reserve_full_length": "no"}}, "profiles.vllm-v1.reserve_full_length"),
])
def test_a_bad_profiles_section_is_one_line_naming_the_file_and_key(tmp_path, capsys, profiles, key) -> None:
    gpu = _calibration(tmp_path, profiles)
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"model": "tiny-llama", "gpu": gpu, "engine": {"max_model_len": 256},
                                    "workload": WORKLOAD}))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {gpu}: {key}: "), err

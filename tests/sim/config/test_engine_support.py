"""Settings the named engine does not have (vLLM V1 with swap preemption, ...) run, with a note
naming the key, the engine and what it does instead; engine-neutral profiles get none."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli.main import main
from sim.config.engine_support import MISSING, engine_notes
from sim.config.scenario import parse_scenario

BASE = {"name": "t", "model": "tiny-llama", "gpu": "a100-80gb", "engine": {"max_model_len": 256},
        "workload": {"num_requests": 5, "arrival": {"type": "poisson", "rate": 5.0},
                     "prompt_tokens": {"type": "fixed", "value": 20},
                     "output_tokens": {"type": "fixed", "value": 5}}}


def _sc(profile: str | None = None, **sections) -> object:
    d = json.loads(json.dumps(BASE))
    if profile is not None:
        d["engine"]["profile"] = profile
    for section, values in sections.items():
        d.setdefault(section, {}).update(values)
    return parse_scenario(d, "t.yaml")


def test_vllm_v1_with_swap_is_noted_named_or_by_default():
    named = engine_notes(_sc("vllm-v1", scheduler={"preemption": "swap"}))
    default = engine_notes(_sc(None, scheduler={"preemption": "swap"}))
    assert len(named) == len(default) == 1
    assert named[0].startswith("scheduler.preemption: swap does not exist in engine profile vllm-v1: ")
    assert default[0].startswith("scheduler.preemption: swap does not exist in engine profile vllm-v1 (the default): ")
    assert "always recomputes" in named[0] and "vllm-v0, eager" in named[0]


@pytest.mark.parametrize("profile", ["vllm-v0", "eager"])
def test_engines_that_swap_get_no_note(profile):
    assert engine_notes(_sc(profile, scheduler={"preemption": "swap"})) == []


@pytest.mark.parametrize("profile", ["eager", "compiled"])
def test_engine_neutral_profiles_get_no_note_for_anything(profile):
    sc = _sc(profile, scheduler={"preemption": "swap", "policy": "static", "when_kv_full": "reject",
                                 "preemption_victim": "most-blocks"},
             kv={"allocator": "contiguous-exact"})
    assert engine_notes(sc) == []


def _cases():
    for key, values, lacking, _, _ in MISSING:
        for value in (values,) if isinstance(values, str) else values:
            for profile in lacking:
                yield key, value, str(profile)


@pytest.mark.parametrize(("key", "value", "profile"), list(_cases()))
def test_every_missing_combination_is_one_note_naming_the_key_and_the_profile(key, value, profile):
    section, name = key.split(".")
    caching = {"prefix_caching": True} if key == "kv.prefix_cache_eviction" else {}  # else evicts nothing
    sc = _sc(profile, **{section: {name: value, **caching}})
    got = [n for n in engine_notes(sc) if n.startswith(f"{key}: {value} ")]
    assert len(got) == 1 and f"engine profile {profile}" in got[0], engine_notes(sc)


def test_a_prefix_eviction_policy_without_prefix_caching_is_no_engine_note():
    assert engine_notes(_sc("vllm-v1", kv={"prefix_caching": False, "prefix_cache_eviction": "lfu"})) == []
    assert len(engine_notes(_sc("vllm-v1", kv={"prefix_caching": True, "prefix_cache_eviction": "lfu"}))) == 1
    assert engine_notes(_sc("vllm-v1", kv={"prefix_caching": True, "prefix_cache_eviction": "lru"})) == []


def test_the_note_is_in_summary_json_and_the_terminal(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "engine": {"profile": "vllm-v1", "max_model_len": 256},
                                    "scheduler": {"preemption": "swap"}}))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-report"]) == 0
    printed = capsys.readouterr().out
    notes = json.loads((tmp_path / "out" / "summary.json").read_text())["notes"]
    assert notes and notes[0].startswith("scheduler.preemption: swap does not exist in engine profile vllm-v1")
    assert "note         scheduler.preemption: swap does not exist in engine profile vllm-v1" in printed

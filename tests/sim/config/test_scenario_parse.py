"""Scenario parsing: vLLM defaults, derived values, frozen configs, cross-section checks."""

from __future__ import annotations

import pydantic
import pytest

from sim.errors import ConfigError
from sim.config.scenario import (
    AllocatorKind, BatchingPolicy, PreemptionMode, WhenKVFull, load_scenario, parse_scenario)

WORKLOAD = {"num_requests": 1, "arrival": {"type": "poisson", "rate": 1.0},
            "prompt_tokens": {"type": "fixed", "value": 10},
            "output_tokens": {"type": "fixed", "value": 10}}


def parse(**data):
    return parse_scenario({"workload": WORKLOAD, **data}, "/tmp/kvsim-test/s.yaml")


def test_defaults_are_the_current_vllms() -> None:
    sc = parse()
    assert sc.engine.profile == "vllm-v1"
    assert sc.kv.allocator is AllocatorKind.PAGED and sc.kv.block_size == 16
    assert sc.kv.prefix_caching
    assert sc.engine.gpu_memory_utilization == 0.9
    assert sc.scheduler.policy is BatchingPolicy.CHUNKED_PREFILL
    assert sc.scheduler.preemption is PreemptionMode.RECOMPUTE
    assert sc.scheduler.when_kv_full is WhenKVFull.QUEUE
    # vLLM V1's batch limits for the default GPU, an A100 80GB behind the API server (256, 2048)
    assert sc.profile_defaults == ("scheduler.policy", "kv.prefix_caching", "scheduler.max_num_seqs",
                                   "scheduler.max_num_batched_tokens")
    assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (256, 2048)


def test_the_eager_profile_keeps_kvsims_plain_defaults() -> None:
    sc = parse(engine={"profile": "eager"})
    assert not sc.kv.prefix_caching and sc.scheduler.policy is BatchingPolicy.CONTINUOUS
    assert sc.profile_defaults == ()


def test_keys_the_user_set_win_over_the_profile() -> None:
    sc = parse(scheduler={"policy": "continuous", "max_num_seqs": 256}, kv={"prefix_caching": False})
    assert not sc.kv.prefix_caching and sc.scheduler.policy is BatchingPolicy.CONTINUOUS
    assert sc.profile_defaults == ()
    # a profile cannot switch prefix caching on where the allocator cannot have it
    sc = parse(kv={"allocator": "contiguous-static"})
    assert not sc.kv.prefix_caching and "kv.prefix_caching" not in sc.profile_defaults


@pytest.mark.parametrize("policy, mml, expected", [
    ("continuous", 4096, 8192), ("continuous", 32768, 32768),
    ("static", 16384, 16384), ("chunked-prefill", 32768, 8192),
])
def test_default_token_budget(policy, mml, expected) -> None:
    # kvsim's own rule (the eager profile; vllm-v1's GPU defaults: test_batch_defaults.py)
    sc = parse(engine={"max_model_len": mml, "profile": "eager"}, scheduler={"policy": policy})
    assert sc.max_num_batched_tokens == expected


def test_explicit_token_budget_wins() -> None:
    sc = parse(scheduler={"policy": "chunked-prefill", "max_num_batched_tokens": 512})
    assert sc.max_num_batched_tokens == 512


def test_budget_below_max_model_len_needs_chunking() -> None:
    with pytest.raises(ConfigError) as exc:
        parse(engine={"max_model_len": 4096},
              scheduler={"policy": "continuous", "max_num_batched_tokens": 1024})
    assert exc.value.key == "scheduler.max_num_batched_tokens"
    assert "chunked-prefill" in exc.value.message


def test_prompt_min_must_leave_room() -> None:
    with pytest.raises(ConfigError) as exc:
        parse(engine={"max_model_len": 100},
              workload={**WORKLOAD, "prompt_tokens": {"type": "uniform", "low": 5, "high": 9, "min": 100}})
    assert exc.value.key == "workload.prompt_tokens"


def test_min_above_max_is_refused() -> None:
    with pytest.raises(ConfigError) as exc:
        parse(workload={**WORKLOAD, "output_tokens": {"type": "fixed", "value": 5, "min": 9, "max": 3}})
    assert exc.value.key == "workload.output_tokens" and "min (9)" in exc.value.message


def test_workload_needs_a_count_or_a_duration() -> None:
    wl = {k: v for k, v in WORKLOAD.items() if k != "num_requests"}
    with pytest.raises(ConfigError) as exc:
        parse(workload=wl)
    assert exc.value.key == "workload" and "duration_s" in exc.value.message


def test_config_is_frozen() -> None:
    sc = parse()
    with pytest.raises(pydantic.ValidationError):
        sc.kv.block_size = 32


def test_relative_paths_resolve_against_the_scenario_file(tmp_path) -> None:
    (tmp_path / "lens.csv").write_text("n\n5\n")
    path = tmp_path / "s.yaml"
    path.write_text(
        "workload:\n  num_requests: 1\n  arrival: {type: constant, rate: 1}\n"
        "  prompt_tokens: {type: empirical, path: lens.csv, column: n}\n"
        "  output_tokens: {type: fixed, value: 3}\n")
    sc = load_scenario(path)
    assert sc.resolve("lens.csv") == tmp_path / "lens.csv"
    assert sc.source_path == str(path)


def test_set_override_parses_yaml_values(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("workload:\n  num_requests: 1\n  arrival: {type: constant, rate: 1}\n"
                    "  prompt_tokens: {type: fixed, value: 3}\n  output_tokens: {type: fixed, value: 3}\n")
    sc = load_scenario(path, ["kv.block_size=32", "kv.prefix_caching=true",
                              "workload.arrival={type: poisson, rate: 2.5}"])
    assert sc.kv.block_size == 32 and sc.kv.prefix_caching is True
    assert sc.workload.arrival.type == "poisson" and sc.workload.arrival.rate == 2.5

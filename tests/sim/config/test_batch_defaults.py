"""vLLM V1's batch limits by GPU under the ``vllm-v1`` profile (sim/config/batch_defaults.py)."""

from __future__ import annotations

import pytest

from sim.config.batch_defaults import GIB, vllm_v1_batch_defaults
from sim.config.scenario import parse_scenario

WORKLOAD = {"num_requests": 1, "arrival": {"type": "poisson", "rate": 1.0},
            "prompt_tokens": {"type": "fixed", "value": 10},
            "output_tokens": {"type": "fixed", "value": 10}}


def parse(**data):
    return parse_scenario({"workload": WORKLOAD, **data}, "/tmp/kvsim-test/s.yaml")


@pytest.mark.parametrize(("memory_gib", "name", "offline", "expected"), [
    (178.35, "NVIDIA B200", False, (1024, 16384)),         # >= 160 GiB: the largest tier, server too
    (178.35, "NVIDIA B200", True, (1024, 16384)),
    (191.69, "AMD Instinct MI300X", False, (1024, 16384)),
    (160.0, "any", False, (1024, 16384)),                  # the boundary is inclusive
    (140.4, "NVIDIA H200", False, (1024, 8192)),           # >= 70 GiB: server 8192, LLM class 16384
    (140.4, "NVIDIA H200", True, (1024, 16384)),
    (79.2, "NVIDIA H100 80GB HBM3", False, (1024, 8192)),
    (70.0, "any", True, (1024, 16384)),
    (79.2, "NVIDIA A100-SXM4-80GB", False, (256, 2048)),   # an A100 stays on the small tier (PR #17885)
    (79.2, "NVIDIA A100-SXM4-80GB", True, (256, 8192)),
    (69.99, "NVIDIA H100 PCIe", False, (256, 2048)),       # below 70 GiB, whatever the name
    (44.45, "NVIDIA L40S", True, (256, 8192)),
])
def test_each_tier(memory_gib, name, offline, expected) -> None:
    assert vllm_v1_batch_defaults(int(memory_gib * GIB), name, offline) == expected


@pytest.mark.parametrize(("gpu", "entrypoint", "seqs", "tokens"), [
    ("b200", "api-server", 1024, 16384),
    ("mi300x", "chat", 1024, 16384),
    ("h200", "api-server", 1024, 8192),
    ("h100-sxm", "offline", 1024, 16384),
    ("h100-sxm", "chat", 1024, 8192),
    ("a100-80gb", "api-server", 256, 2048),
    ("a100-80gb", "offline", 256, 8192),
    ("l40s", "api-server", 256, 2048),
])
def test_a_vllm_v1_scenario_gets_its_calibrations_tier(gpu, entrypoint, seqs, tokens) -> None:
    sc = parse(gpu=gpu, engine={"entrypoint": entrypoint})
    assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (seqs, tokens)
    assert {"scheduler.max_num_seqs", "scheduler.max_num_batched_tokens"} <= set(sc.profile_defaults)


def test_the_default_scenario_is_vllm_serve_on_an_a100() -> None:
    sc = parse()
    assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (256, 2048)


def test_keys_the_scenario_sets_are_kept() -> None:
    sc = parse(gpu="h100-sxm", scheduler={"max_num_seqs": 64})
    assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (64, 8192)
    assert "scheduler.max_num_seqs" not in sc.profile_defaults
    sc = parse(gpu="h100-sxm", scheduler={"max_num_batched_tokens": 4096})
    assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (1024, 4096)


def test_other_profiles_keep_kvsims_fixed_defaults() -> None:
    for profile in ("eager", "vllm-v0", "sglang"):
        sc = parse(gpu="h100-sxm", engine={"profile": profile}, scheduler={"policy": "chunked-prefill"})
        assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (256, 8192), profile
        assert not {"scheduler.max_num_seqs", "scheduler.max_num_batched_tokens"} & set(sc.profile_defaults)


def test_without_chunking_the_budget_keeps_kvsims_rule() -> None:
    # V1 always chunks; a vllm-v1 what-if without chunking keeps max(8192, max_model_len).
    sc = parse(gpu="b200", scheduler={"policy": "continuous"}, engine={"max_model_len": 4096})
    assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (1024, 8192)
    assert "scheduler.max_num_batched_tokens" not in sc.profile_defaults


def test_an_unknown_gpu_is_left_to_the_memory_plan() -> None:
    sc = parse(gpu="no-such-gpu")  # parsing does not load the calibration's errors; the run reports them
    assert (sc.scheduler.max_num_seqs, sc.max_num_batched_tokens) == (256, 8192)

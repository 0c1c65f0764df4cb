"""The memory plan's terms against the per-term breakdowns real vLLM startup logs printed
(the published cases in benchmarks/published/cases/ cite each log)."""

from __future__ import annotations

import pytest

from sim.calib.calibration import load_calibration
from sim.model.hf_config import load_model
from sim.model.memory import (
    DEFAULT_RUNTIME_OVERHEAD_BYTES, TP_RUNTIME_OVERHEAD_BYTES, default_runtime_overhead_bytes,
    estimate_activation_peak_bytes, plan_memory)
from sim.model.parallel import shard_model

GIB = 1 << 30


@pytest.mark.parametrize(("tokens", "logged_gib"), [(20_000, 2.07), (29_000, 2.99)])
def test_forward_peak_matches_the_logged_activation_peak(tokens: int, logged_gib: float) -> None:
    # vllm-project/vllm #10517: Llama-3.1-8B on an RTX 3090, V0, profile runs of 20k and 29k tokens
    act = estimate_activation_peak_bytes(load_model("llama-3.1-8b"), max_num_batched_tokens=tokens,
                                         max_num_seqs=256)
    assert act / GIB == pytest.approx(logged_gib, rel=0.02)


def test_growth_between_two_profile_sizes_is_the_forward_pass_alone() -> None:
    model = load_model("llama-3.1-8b")
    small, big = (estimate_activation_peak_bytes(model, max_num_batched_tokens=t, max_num_seqs=256)
                  for t in (20_000, 29_000))
    assert (big - small) / GIB == pytest.approx(2.99 - 2.07, rel=0.03)  # 0.92 GiB logged


@pytest.mark.parametrize("tp", [1, 2])
def test_sampler_is_the_peak_at_8192_tokens(tp: int) -> None:
    # vllm-project/vllm PR #10511: Llama-3-8B on H100s, 8192 tokens, 256 sequences: 1.26 GiB at TP 1 and 2
    model = load_model("llama-3-8b")
    shard = shard_model(model, tp)
    act = estimate_activation_peak_bytes(shard, max_num_batched_tokens=8192, max_num_seqs=256,
                                         sampler_vocab_size=model.vocab_size)
    forward_only = estimate_activation_peak_bytes(shard, max_num_batched_tokens=8192, max_num_seqs=256,
                                                  sampler_vocab_size=0)
    assert forward_only < act
    assert act / GIB == pytest.approx(1.26, rel=0.05)


def test_breakdown_case_matches_every_logged_term() -> None:
    # PR #10511, one H100: weights 14.96, activation 1.26, KV 53.29 GiB of 0.9 x 79.22
    plan = plan_memory(load_model("llama-3-8b"), load_calibration("h100-sxm").memory_bytes,
                       max_model_len=8192, max_num_batched_tokens=8192, max_num_seqs=256, engine_profile="vllm-v0")
    assert plan.weight_bytes / GIB == pytest.approx(14.96, rel=0.01)
    assert plan.activation_peak_bytes / GIB == pytest.approx(1.26, rel=0.05)
    assert plan.kv_pool_bytes / GIB == pytest.approx(53.29, rel=0.05)


def test_tensor_parallel_adds_collective_buffers() -> None:
    assert default_runtime_overhead_bytes(1) == DEFAULT_RUNTIME_OVERHEAD_BYTES
    assert default_runtime_overhead_bytes(2) == default_runtime_overhead_bytes(8) == (
        DEFAULT_RUNTIME_OVERHEAD_BYTES + TP_RUNTIME_OVERHEAD_BYTES)
    assert TP_RUNTIME_OVERHEAD_BYTES > 0
    plan = plan_memory(load_model("llama-3-8b"), load_calibration("h100-sxm").memory_bytes, max_model_len=8192,
                       tensor_parallel_size=2)
    assert plan.runtime_overhead_bytes == DEFAULT_RUNTIME_OVERHEAD_BYTES + TP_RUNTIME_OVERHEAD_BYTES

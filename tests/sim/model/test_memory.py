"""KV pool sizing: vLLM's startup arithmetic on hand-computed tiny worlds."""

from __future__ import annotations

import dataclasses

import pytest

from sim.errors import ConfigError
from sim.model.activations import TRTLLM_DECODER_BYTES_PER_LOGIT
from sim.model.memory import (
    DEFAULT_RUNTIME_OVERHEAD_BYTES, LEGACY_RUNTIME_OVERHEAD_BYTES, SAMPLER_BYTES_PER_LOGIT, check_fits_one_sequence,
    estimate_activation_peak_bytes, plan_memory)
from sim.model.spec import KVDtype
from sim.model.hf_config import load_model

MIB = 1 << 20


def tiny_plan(**overrides):
    kwargs = dict(gpu_memory_utilization=0.5, max_model_len=2048, activation_peak_bytes=10 * MIB,
                  runtime_overhead_bytes=100 * MIB)
    return plan_memory(load_model("tiny-llama"), 1 << 30, **(kwargs | overrides))


def test_pool_sizing_by_hand() -> None:
    plan = tiny_plan()
    weights = 2 * 1_705_216
    pool = (1 << 29) - weights - 10 * MIB - 100 * MIB
    assert plan.weight_bytes == weights and plan.kv_pool_bytes == pool == 418_117_120
    assert plan.bytes_per_token == 2 * 2 * 2 * 64 * 2 == 1024
    assert plan.bytes_per_block == 16 * 1024
    assert plan.num_gpu_blocks == pool // (16 * 1024) == 25_519
    assert plan.pool_tokens == 25_519 * 16
    assert plan.blocks_per_full_seq == 128 and plan.max_full_length_seqs == 25_519 // 128 == 199
    assert plan.max_concurrency == pytest.approx(25_519 * 16 / 2048)


def test_quantized_block_rounds_up() -> None:
    plan = tiny_plan(kv_dtype="int4", quant_group_size=48, block_size=3)
    # per token: 8 vectors x (64 x 0.5 + ceil(64/48) x 2) = 8 x 36 = 288 bytes
    assert plan.bytes_per_token == 288 and plan.bytes_per_block == 864
    assert plan.kv_dtype is KVDtype.INT4


def test_activation_estimate_by_hand() -> None:
    model = load_model("tiny-llama")
    per_token = 3 * 256 + max(8 * 64 + 4 * 64, 3 * 512)  # MLP is the widest moment
    forward = 8192 * per_token * 2
    sampler = 256 * 1024 * SAMPLER_BYTES_PER_LOGIT + 8192 * 256 * 2  # logits + the final hidden states
    assert estimate_activation_peak_bytes(model, max_num_batched_tokens=8192, max_num_seqs=256) == max(
        forward, sampler) == forward
    # few tokens, many sequences: the sampler is the peak
    assert estimate_activation_peak_bytes(model, max_num_batched_tokens=64, max_num_seqs=256) == (
        256 * 1024 * SAMPLER_BYTES_PER_LOGIT + 64 * 256 * 2)
    plan = plan_memory(model, 1 << 30, max_model_len=2048)
    assert plan.activation_peak_bytes == forward
    assert plan.runtime_overhead_bytes == DEFAULT_RUNTIME_OVERHEAD_BYTES


def test_other_engines_keep_the_legacy_estimate() -> None:
    model = load_model("tiny-llama")
    forward = 8192 * (2 * 256 + 3 * 512) * 2
    legacy = forward + 256 * 1024 * 4 * 2  # forward + two fp32 copies of the logits
    trt = forward + 256 * 1024 * 29  # forward + TensorRT-LLM's runtime buffers and decoder, 256 slots
    for profile, expected in (("trtllm", trt), ("sglang", legacy), ("eager", legacy)):
        assert estimate_activation_peak_bytes(model, max_num_batched_tokens=8192, max_num_seqs=256,
                                              engine_profile=profile) == expected
        plan = plan_memory(model, 1 << 30, max_model_len=2048, engine_profile=profile)
        assert plan.activation_peak_bytes == expected
        assert plan.runtime_overhead_bytes == LEGACY_RUNTIME_OVERHEAD_BYTES
    assert plan_memory(model, 1 << 30, max_model_len=2048, engine_profile="vllm-v0") == plan_memory(
        model, 1 << 30, max_model_len=2048)


def test_trtllm_decoder_buffers_match_its_startup_logs() -> None:
    # NVIDIA/TensorRT-LLM issue #1188: Qwen2.5-Coder-0.5B (vocabulary 151,936) at the build's default
    # max_batch_size 2,048 logs 2.66 GB of runtime buffers and 5.76 GB of decoder; the perf-benchmarking
    # doc's 28-layer, 4096-wide model (GPT-J's 50,400 entries) at 4,096 slots logs 1.14 + 4.35 GB.
    for vocab, slots, logged_gib in ((151_936, 2048, 2.66 + 5.76), (50_400, 4096, 1.14 + 4.35)):
        estimate = slots * vocab * TRTLLM_DECODER_BYTES_PER_LOGIT / (1 << 30)
        assert abs(estimate / logged_gib - 1) < 0.03, (vocab, slots, estimate, logged_gib)
    # the buffers grow with the slots, not with the token budget
    model = load_model("tiny-llama")
    small, large = (estimate_activation_peak_bytes(model, max_num_batched_tokens=2048, max_num_seqs=n,
                                                   engine_profile="trtllm") for n in (64, 4096))
    assert large - small == (4096 - 64) * model.vocab_size * TRTLLM_DECODER_BYTES_PER_LOGIT


def test_llama_3_8b_on_80_gib_is_in_vllm_range() -> None:
    plan = plan_memory(load_model("llama-3-8b"), 80 << 30, max_model_len=8192)
    # vLLM reports roughly 54-57 GiB of KV cache for this setup.
    assert 54 << 30 < plan.kv_pool_bytes < 57 << 30
    assert plan.max_full_length_seqs == plan.num_gpu_blocks // 512


def test_no_room_raises_with_the_numbers() -> None:
    with pytest.raises(ConfigError) as err:
        plan_memory(load_model("qwen2.5-7b"), 8 << 30, max_model_len=4096, source="s.yaml")
    assert err.value.file == "s.yaml" and err.value.key == "gpu_memory_utilization"
    assert "no memory left for the KV cache" in err.value.message
    assert "weights 14.19 GiB" in err.value.message


def test_override_replaces_block_count() -> None:
    assert tiny_plan(num_gpu_blocks_override=11).num_gpu_blocks == 11


def test_fits_one_sequence_is_a_separate_check() -> None:
    plan = tiny_plan(num_gpu_blocks_override=11)  # 176 tokens
    check_fits_one_sequence(plan, 176)
    with pytest.raises(ConfigError) as err:
        check_fits_one_sequence(plan, 177, "s.yaml")
    assert err.value.key == "max_model_len" and "needs 12 KV blocks" in err.value.message
    assert "max_model_len <= 176" in err.value.message
    # the pool's size is its blocks' (an override's 11 blocks), not the memory budget's
    pool = f"the pool has 11 ({11 * plan.bytes_per_block / 2**20:.2f} MiB)"  # tiny: MiB, not "0.00 GiB"
    assert pool in err.value.message and plan.kv_pool_bytes > 11 * plan.bytes_per_block


def test_sliding_window_needs_only_the_window() -> None:
    windowed = dataclasses.replace(load_model("tiny-llama"), sliding_window=160)
    plan = plan_memory(windowed, 1 << 30, max_model_len=4096, num_gpu_blocks_override=10,
                       activation_peak_bytes=0, runtime_overhead_bytes=0)
    assert plan.max_kv_tokens_per_seq == 160 and plan.max_full_length_seqs == 1
    check_fits_one_sequence(plan, 4096)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"block_size": 0}, "block_size"),
    ({"max_model_len": 0}, "max_model_len"),
    ({"kv_dtype": "fp4"}, "kv_dtype"),
    ({"num_gpu_blocks_override": 0}, "num_gpu_blocks_override"),
])
def test_bad_arguments_name_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        tiny_plan(**kwargs)
    assert err.value.key == key


def test_tensorrt_llm_sizes_its_kv_cache_from_the_memory_left_free() -> None:
    """kv_cache_free_gpu_mem_fraction: that share of what the weights, activations and runtime
    leave, whatever gpu_memory_utilization says (TensorRT-LLM's KvCacheConfig)."""
    weights = 2 * 1_705_216
    free = (1 << 30) - weights - 10 * MIB - 100 * MIB
    plan = tiny_plan(kv_free_memory_fraction=0.9)
    assert plan.kv_pool_bytes == int(0.9 * free) and plan.kv_free_memory_fraction == 0.9
    other = tiny_plan(kv_free_memory_fraction=0.9, gpu_memory_utilization=0.2)  # not used
    assert (other.kv_pool_bytes, other.num_gpu_blocks) == (plan.kv_pool_bytes, plan.num_gpu_blocks)
    assert plan.kv_pool_bytes > tiny_plan().kv_pool_bytes  # vLLM's 0.5 of the total leaves less
    with pytest.raises(ConfigError) as err:
        tiny_plan(kv_free_memory_fraction=1.5)
    assert err.value.key == "kv_cache_free_gpu_mem_fraction"
    with pytest.raises(ConfigError) as err:  # nothing free: named by its own key
        plan_memory(load_model("tiny-llama"), weights + 50 * MIB, kv_free_memory_fraction=0.9, max_model_len=2048,
                    activation_peak_bytes=10 * MIB, runtime_overhead_bytes=100 * MIB)
    assert err.value.key == "kv_cache_free_gpu_mem_fraction" and "0.9 of what is free" in err.value.message


def test_a_scenario_takes_the_free_fraction(scenario_dict, tmp_path) -> None:
    from sim.config.scenario import parse_scenario
    from sim.engine.parts import build_plan

    def plan(**engine):
        return build_plan(parse_scenario(scenario_dict(engine=engine), str(tmp_path / "s.yaml")))[2]

    base, trt = plan(), plan(kv_cache_free_gpu_mem_fraction=0.9)
    left = base.gpu_memory_bytes - base.weight_bytes - base.activation_peak_bytes - base.runtime_overhead_bytes
    assert trt.kv_pool_bytes == int(0.9 * left) and base.kv_free_memory_fraction is None
    with pytest.raises(ConfigError) as err:
        plan(kv_cache_free_gpu_mem_fraction=0)
    assert err.value.key == "engine.kv_cache_free_gpu_mem_fraction"

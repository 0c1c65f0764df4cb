"""Tensor parallelism: one GPU's share of a model, the checks on tp, and the per-GPU memory plan."""

from __future__ import annotations

import pytest

from sim.calib.calibration import load_calibration
from sim.errors import ConfigError
from sim.model.hf_config import load_model
from sim.model.memory import estimate_activation_peak_bytes, plan_memory
from sim.model.parallel import TP_KEY, check_tensor_parallel, kv_heads_per_gpu, shard_model
from sim.model.spec import kv_bytes_per_token
from sim.model.weights import weight_bytes


def test_llama_3_70b_over_4_gpus_holds_a_quarter_each() -> None:
    model = load_model("llama-3-70b")
    shard = shard_model(model, 4)
    assert (shard.num_attention_heads, shard.num_kv_heads) == (16, 2)
    assert kv_heads_per_gpu(model, 4) == 2
    assert shard.intermediate_size == 28672 // 4 and shard.vocab_size == 128256 // 4
    assert shard.hidden_size == model.hidden_size and shard.num_layers == model.num_layers
    # everything but the replicated norms is split: a quarter, plus a sliver
    norms = (2 * 80 + 1) * 8192
    assert shard.num_params == (model.num_params - norms) // 4 + norms
    assert weight_bytes(shard) == pytest.approx(weight_bytes(model) / 4, rel=1e-4)
    assert kv_bytes_per_token(shard, "bf16") == kv_bytes_per_token(model, "bf16") // 4 == 81920


def test_kv_heads_fewer_than_tp_are_replicated() -> None:
    model = load_model("qwen3-30b-a3b")  # 32 attention heads, 4 KV heads, MoE
    shard = shard_model(model, 8)
    assert shard.num_kv_heads == kv_heads_per_gpu(model, 8) == 1
    assert shard.num_attention_heads == 4
    per_gpu = kv_bytes_per_token(shard, "bf16")
    assert per_gpu == 2 * model.num_layers * 1 * model.head_dim * 2
    assert per_gpu * 8 == 2 * kv_bytes_per_token(model, "bf16")  # 8 GPUs hold 2 copies of every head
    # MoE as vLLM's default: every expert on every GPU, each expert's intermediate split
    assert shard.num_experts == model.num_experts
    assert shard.moe_intermediate_size == model.moe_intermediate_size // 8


def test_mla_latent_is_replicated() -> None:
    model = load_model("deepseek-v2-lite")
    shard = shard_model(model, 4)
    assert kv_bytes_per_token(shard, "bf16") == kv_bytes_per_token(model, "bf16") == 31104
    assert shard.num_attention_heads == 4


def test_tp_1_is_the_model_itself() -> None:
    model = load_model("llama-3-8b")
    assert shard_model(model, 1) is model
    check_tensor_parallel(model, 1)


@pytest.mark.parametrize(("model", "tp", "fragment"), [
    ("llama-3-70b", 3, "allowed: 1, 2, 4, 8"),
    ("llama-3-70b", 16, "allowed: 1, 2, 4, 8"),
    ("qwen2.5-7b", 8, "does not divide qwen2.5-7b's 28 attention heads; allowed for this model: 1, 2, 4"),
])
def test_bad_tp_is_one_error_naming_the_key(model: str, tp: int, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_tensor_parallel(load_model(model), tp, "s.yaml", TP_KEY)
    assert err.value.key == "engine.tensor_parallel_size" and err.value.file == "s.yaml"
    assert fragment in err.value.message and "\n" not in str(err.value)


def test_kv_heads_that_neither_divide_nor_are_divided_by_tp_are_refused() -> None:
    import dataclasses

    model = dataclasses.replace(load_model("llama-3-8b"), num_kv_heads=6, num_attention_heads=48)
    with pytest.raises(ConfigError, match="6 KV heads cannot be split over 4 GPUs"):
        check_tensor_parallel(model, 4, "s.yaml", TP_KEY)
    check_tensor_parallel(model, 2)  # 2 divides 6


def test_70b_bf16_fits_on_4_h100_and_not_on_1() -> None:
    model, cal = load_model("llama-3-70b"), load_calibration("h100-sxm")
    with pytest.raises(ConfigError, match="no memory left for the KV cache"):
        plan_memory(model, cal.memory_bytes, max_model_len=8192)
    plan = plan_memory(model, cal.memory_bytes, max_model_len=8192, tensor_parallel_size=4)
    shard = shard_model(model, 4)
    assert plan.tensor_parallel_size == 4
    assert plan.weight_bytes == weight_bytes(shard)
    assert plan.bytes_per_token == 81920
    budget = cal.memory_bytes * 0.9
    assert plan.kv_pool_bytes == int(budget - plan.weight_bytes - plan.activation_peak_bytes
                                     - plan.runtime_overhead_bytes)
    assert plan.num_gpu_blocks == plan.kv_pool_bytes // (16 * 81920)
    # the sampler runs over the whole, gathered vocabulary on each GPU
    assert plan.activation_peak_bytes == estimate_activation_peak_bytes(
        shard, max_num_batched_tokens=8192, max_num_seqs=256, sampler_vocab_size=model.vocab_size)
    assert plan.activation_peak_bytes > estimate_activation_peak_bytes(
        shard, max_num_batched_tokens=8192, max_num_seqs=256)


def test_more_gpus_give_more_kv_tokens() -> None:
    model, cal = load_model("llama-3-70b"), load_calibration("h100-sxm")
    tokens = [plan_memory(model, cal.memory_bytes, max_model_len=8192, tensor_parallel_size=tp).pool_tokens
              for tp in (2, 4, 8)]
    assert tokens[0] < tokens[1] < tokens[2]


def test_plan_memory_refuses_a_bad_tp() -> None:
    with pytest.raises(ConfigError) as err:
        plan_memory(load_model("qwen2.5-7b"), 80 << 30, max_model_len=4096, tensor_parallel_size=8)
    assert err.value.key == "tensor_parallel_size"


def test_tp_1_plan_is_unchanged() -> None:
    model, cal = load_model("llama-3-8b"), load_calibration("a100-80gb")
    assert plan_memory(model, cal.memory_bytes, max_model_len=8192) == plan_memory(
        model, cal.memory_bytes, max_model_len=8192, tensor_parallel_size=1)

"""Model shapes: presets match their config.json, KV bytes per token, weights, FLOPs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.model.spec import (
    KVDtype, ModelSpec, attn_flops_per_pair, flops_per_token, kv_bytes_per_token, linear_ops,
    max_kv_tokens_per_seq)
from sim.model.weights import weight_bytes
from sim.model.hf_config import available_models, load_model

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.mark.parametrize(("name", "expected"), [
    ("qwen2.5-7b", 57344), ("llama-3-8b", 131072), ("llama-2-7b", 524288), ("llama-3-70b", 327680),
])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_kv_bytes_per_token_acceptance_figures(name: str, expected: int, dtype: str) -> None:
    value = kv_bytes_per_token(load_model(name), dtype)
    assert value == expected
    assert isinstance(value, int)


def test_mla_stores_one_latent_per_layer() -> None:
    model = load_model("deepseek-v2-lite")
    assert model.is_mla
    assert kv_bytes_per_token(model, KVDtype.BF16) == 27 * (512 + 64) * 2 == 31104


def test_quantized_kv_adds_one_scale_per_group() -> None:
    model = load_model("qwen2.5-7b")  # 2 x 28 x 4 = 224 vectors of 128 elements
    assert kv_bytes_per_token(model, "int8") == 224 * 128 + 224 * 2 * 2 == 29568
    assert kv_bytes_per_token(model, "int4") == 224 * 64 + 224 * 2 * 2 == 15232
    assert kv_bytes_per_token(model, "int8", quant_group_size=128, scale_bytes=4) == 224 * 128 + 224 * 4
    assert kv_bytes_per_token(model, "fp8") == 28672  # per-tensor scale: no per-token bytes
    # A group that does not divide the vector still costs a whole scale: ceil(128 / 48) = 3.
    assert kv_bytes_per_token(model, "int8", quant_group_size=48) == 224 * 128 + 224 * 3 * 2


def test_non_integral_bytes_stay_float() -> None:
    tiny = dataclasses.replace(load_model("tiny-llama"), head_dim=3, num_kv_heads=1, num_layers=1)
    assert kv_bytes_per_token(tiny, "int4", quant_group_size=64, scale_bytes=2) == 2 * 1.5 + 2 * 2


def test_hf_config_loads_identical_to_preset() -> None:
    from_file = load_model(str(FIXTURES / "qwen2.5-7b" / "config.json"))
    from_dir = load_model(str(FIXTURES / "qwen2.5-7b"))
    preset = load_model("Qwen2.5-7B")
    assert dataclasses.replace(from_file, name=preset.name) == preset
    assert from_dir == from_file and from_file.name == "qwen2.5-7b"
    assert preset.sliding_window is None  # use_sliding_window: false
    ds = load_model(str(FIXTURES / "deepseek-v2-lite.config.json"))
    assert dataclasses.replace(ds, name="deepseek-v2-lite") == load_model("deepseek-v2-lite")


@pytest.mark.parametrize(("name", "num_params"), [
    ("llama-2-7b", 6_738_415_616), ("llama-2-13b", 13_015_864_320), ("llama-2-70b", 68_976_648_192),
    ("llama-3-8b", 8_030_261_248), ("llama-3-70b", 70_553_706_496), ("mistral-7b", 7_241_732_096),
    ("qwen2.5-1.5b", 1_543_714_304), ("qwen2.5-3b", 3_085_938_688), ("qwen2.5-7b", 7_615_616_512),
    ("qwen2.5-32b", 32_763_876_352), ("opt-13b", 12_853_473_280),
    ("deepseek-v2-lite", 15_706_484_224),
])
def test_num_params_match_published_checkpoints(name: str, num_params: int) -> None:
    assert load_model(name).num_params == num_params


def test_moe_active_params_skip_unrouted_experts() -> None:
    model = load_model("deepseek-v2-lite")
    expert = 3 * 2048 * 1408
    assert model.num_moe_layers == 26 and model.num_dense_mlp_layers == 1
    assert model.num_active_params == model.num_params - 26 * (64 - 6) * expert
    dense = load_model("llama-3-8b")
    assert dense.num_active_params == dense.num_params


def test_tiny_llama_params_by_hand() -> None:
    m = load_model("tiny-llama")
    attn = 256 * (4 + 2 + 2) * 64 + 4 * 64 * 256
    mlp = 3 * 256 * 512
    assert m.num_params == 2 * (attn + mlp + 2 * 256) + 256 + 2 * 1024 * 256
    assert weight_bytes(m) == 2 * m.num_params
    vocab = 1024 * 256  # the embedding table and the lm_head: 16-bit beside int4 layers, unless told
    assert weight_bytes(m, 0.5) == (m.num_params - 2 * vocab) // 2 + 2 * 2 * vocab
    assert weight_bytes(m, 0.5, embedding_bytes=0.5) == m.num_params // 2  # a GGUF file: all 4-bit
    assert flops_per_token(m) == 2 * (2 * (attn + mlp) + 1024 * 256)
    assert attn_flops_per_pair(m) == 2 * 4 * 4 * 64
    assert [op.name for op in linear_ops(m)] == ["qkv", "o", "gate_up", "down"]


def test_sliding_window_caps_tokens_per_sequence() -> None:
    mistral = load_model("mistral-7b")
    assert mistral.sliding_window == 4096
    assert kv_bytes_per_token(mistral, "bf16") == 131072
    assert max_kv_tokens_per_seq(mistral, 32768) == 4096
    assert max_kv_tokens_per_seq(mistral, 1000) == 1000
    assert max_kv_tokens_per_seq(load_model("llama-3-8b"), 8192) == 8192


def test_unknown_model_names_the_key_and_the_choices() -> None:
    with pytest.raises(ConfigError) as err:
        load_model("llama-9-9b")
    assert err.value.key == "model"
    assert str(err.value).startswith("<cli>: model: unknown model 'llama-9-9b' (did you mean 'llama-3-8b'")
    assert "; use one of: " in str(err.value)
    assert "qwen2.5-7b" in str(err.value) and "HuggingFace config.json" in str(err.value)
    assert set(available_models()) >= {"llama-2-7b", "deepseek-v2-lite", "tiny-llama", "opt-13b"}


def test_bad_config_json_names_file_and_key(tmp_path: Path) -> None:
    cfg = json.loads((FIXTURES / "qwen2.5-7b" / "config.json").read_text())
    cfg["num_hidden_layers"] = "28"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="num_hidden_layers: expected int"):
        load_model(str(path))
    del cfg["num_hidden_layers"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="num_hidden_layers: required key missing"):
        load_model(str(path))
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read HuggingFace config"):
        load_model(str(path), source="scenario.yaml", key="model.name")


def test_spec_validates_shapes() -> None:
    with pytest.raises(ValueError, match="num_layers"):
        ModelSpec(name="x", num_layers=0, hidden_size=8, num_attention_heads=1, num_kv_heads=1,
                  head_dim=8, intermediate_size=8, vocab_size=8)
    with pytest.raises(ValueError, match="quant_group_size"):
        kv_bytes_per_token(load_model("tiny-llama"), "int8", quant_group_size=0)

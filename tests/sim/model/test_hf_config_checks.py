"""config.json checks: every problem is one ConfigError naming the file and the key."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.model.hf_config import load_model

FIXTURES = Path(__file__).parents[1] / "fixtures"
QWEN = json.loads((FIXTURES / "qwen2.5-7b" / "config.json").read_text())
DEEPSEEK = json.loads((FIXTURES / "deepseek-v2-lite.config.json").read_text())
MOE = json.loads((FIXTURES / "qwen1.5-moe-a2.7b.config.json").read_text())


def write(tmp_path: Path, cfg: dict, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.mark.parametrize(("base", "change", "key", "fragment"), [
    (QWEN, {"num_key_value_heads": 5}, "num_key_value_heads", "must divide num_attention_heads (28)"),
    (QWEN, {"num_key_value_heads": 56}, "num_key_value_heads", "must divide"),
    (QWEN, {"hidden_size": 3585}, "hidden_size", "multiple of num_attention_heads (28)"),
    (QWEN, {"num_hidden_layers": 0}, "num_hidden_layers", "must be an integer in [1, 4096], got 0"),
    (QWEN, {"hidden_size": -8}, "hidden_size", "must be an integer in [1, "),
    (QWEN, {"vocab_size": 10**12}, "vocab_size", "must be an integer in [1, 16777216]"),
    (QWEN, {"intermediate_size": 1.5}, "intermediate_size", "expected int"),
    (QWEN, {"intermediate_size": math.inf}, "intermediate_size", "expected int"),
    (QWEN, {"num_attention_heads": True}, "num_attention_heads", "expected int"),
    (QWEN, {"tie_word_embeddings": "no"}, "tie_word_embeddings", "expected true or false"),
    (QWEN, {"vocab_size": None}, "vocab_size", "required key missing"),
    (QWEN, {"model_type": 7}, "model_type", "expected a string"),
    (QWEN, {"use_sliding_window": True, "max_window_layers": -1}, "max_window_layers", "[0, "),
    (QWEN, {"layer_types": ["full_attention"] * 3}, "layer_types", "a list of 28 entries"),
    (QWEN, {"layer_types": ["linear_attention"] * 28}, "layer_types", "full_attention, sliding_attention"),
    (QWEN, {"layer_types": ["sliding_attention"] * 28, "sliding_window": None}, "sliding_window", "required"),
    (DEEPSEEK, {"qk_rope_head_dim": None}, "qk_rope_head_dim", "required key missing"),
    (DEEPSEEK, {"v_head_dim": 0}, "v_head_dim", "must be an integer"),
    (DEEPSEEK, {"num_experts_per_tok": 65}, "num_experts_per_tok", "at most n_routed_experts (64)"),
    (DEEPSEEK, {"num_experts_per_tok": None}, "num_experts_per_tok", "required key missing"),
    (DEEPSEEK, {"first_k_dense_replace": -1}, "first_k_dense_replace", "[0, 4096]"),
    (DEEPSEEK, {"moe_layer_freq": 0}, "moe_layer_freq", "[1, 4096]"),
    (MOE, {"mlp_only_layers": [24]}, "mlp_only_layers", "layer indices in [0, 24)"),
    (MOE, {"decoder_sparse_step": 0}, "decoder_sparse_step", "[1, 4096]"),
])
def test_bad_value_names_file_and_key(tmp_path: Path, base: dict, change: dict, key: str, fragment: str) -> None:
    cfg = {k: v for k, v in {**base, **change}.items() if v is not None or k not in change}  # None: drop
    path = write(tmp_path, cfg)
    with pytest.raises(ConfigError) as err:
        load_model(path, source="scenario.yaml", key="model")
    assert err.value.file == path and err.value.key == key, str(err.value)
    assert fragment in err.value.message
    assert "\n" not in str(err.value)


def test_missing_required_keys(tmp_path: Path) -> None:
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"):
        cfg = dict(QWEN)
        del cfg[key]
        with pytest.raises(ConfigError, match=f"{key}: required key missing"):
            load_model(write(tmp_path, cfg))


def test_unknown_model_type_warns_once_and_reads_llama_style(tmp_path: Path, capsys) -> None:
    cfg = {**QWEN, "model_type": "brand_new_lm"}
    path = write(tmp_path, cfg, "brand.json")
    m = load_model(path)
    load_model(path)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {path}: model_type: 'brand_new_lm' is not one")
    assert "assumed a llama-style decoder" in err[0]
    assert not m.qkv_bias and m.sliding_window is None  # use_sliding_window: false still honoured
    assert m.num_kv_heads == 4 and m.head_dim == 128
    load_model("qwen2.5-7b")
    assert capsys.readouterr().err == ""  # a known type: silent


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "1" * 5000, "[" * 100_000, '{"a": NaN'])
def test_unreadable_json_is_one_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_model(str(path))
    assert "\n" not in str(err.value)

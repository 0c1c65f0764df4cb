"""Per-layer attention windows: which layers slide, and a sequence's exact KV bytes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.model.attention import (
    attention_layers, is_mixed, kv_bytes_per_seq, layer_windows, simulator_bytes_per_seq)
from sim.model.hf_config import available_models, load_model, spec_from_hf_config
from sim.model.spec import kv_bytes_per_token, max_kv_tokens_per_seq

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_gemma2_alternates_sliding_and_full_layers() -> None:
    m = load_model("gemma-2-9b")
    windows = layer_windows(m)
    assert windows[:4] == (4096, None, 4096, None) and len(windows) == 42
    assert m.sliding_window is None and is_mixed(m)
    assert attention_layers(m) == [{"window": None, "layers": 21}, {"window": 4096, "layers": 21}]
    per_layer = 2 * 8 * 256 * 2
    exact = kv_bytes_per_seq(m, "bf16", 8192, block_size=16)
    assert exact == 21 * per_layer * 8192 + 21 * per_layer * 4096
    # the window applied to every layer (kvsim before) was a third too low
    assert 42 * per_layer * 4096 == pytest.approx(exact * 2 / 3)
    # the simulator keeps every layer's token (vLLM without the hybrid KV cache manager)
    assert max_kv_tokens_per_seq(m, 8192) == 8192
    assert simulator_bytes_per_seq(m, "bf16", 8192, block_size=16) == 42 * per_layer * 8192
    assert kv_bytes_per_seq(m, "bf16", 4096, block_size=16) == 42 * per_layer * 4096  # inside the window


def test_gemma3_five_sliding_to_one_full() -> None:
    m = load_model("gemma-3-27b")
    windows = layer_windows(m)
    assert [i for i, w in enumerate(windows) if w is None] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert set(windows) == {None, 1024}
    per_layer = 2 * 16 * 128 * 2
    assert kv_bytes_per_seq(m, "bf16", 131072, block_size=16) == per_layer * (10 * 131072 + 52 * 1024)
    nested = load_model(str(FIXTURES / "gemma-3-27b"))  # the vision-language config.json, text_config
    assert dataclasses.replace(nested, name="gemma-3-27b") == m


def test_gemma2_fixture_equals_preset() -> None:
    m = load_model(str(FIXTURES / "gemma-2-9b.config.json"))
    assert dataclasses.replace(m, name="gemma-2-9b") == load_model("gemma-2-9b")


def test_mistral_window_covers_every_layer() -> None:
    m = load_model("mistral-7b")
    assert m.sliding_window == 4096 and m.layer_windows is None and not is_mixed(m)
    assert kv_bytes_per_seq(m, "bf16", 32768, block_size=16) == 4096 * 131072
    assert simulator_bytes_per_seq(m, "bf16", 32768, block_size=16) == 4096 * 131072


BASE = {"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000, "sliding_window": 64}


@pytest.mark.parametrize(("extra", "expected"), [
    ({"use_sliding_window": False}, (None,) * 4),
    ({}, (None,) * 4),  # Qwen2: use_sliding_window defaults to false
    ({"use_sliding_window": True, "max_window_layers": 2}, (None, None, 64, 64)),
    ({"use_sliding_window": True, "max_window_layers": 0}, (64,) * 4),
    ({"use_sliding_window": True, "max_window_layers": 28}, (None,) * 4),
    ({"layer_types": ["sliding_attention", "full_attention"] * 2}, (64, None, 64, None)),
    ({"model_type": "mistral"}, (64,) * 4),
    ({"model_type": "mistral", "use_sliding_window": False}, (None,) * 4),
    ({"model_type": "gemma3_text", "sliding_window_pattern": 2}, (64, None, 64, None)),
])
def test_window_rules(extra: dict, expected: tuple) -> None:
    m = spec_from_hf_config({**BASE, **extra}, name="t", source="t.json")
    assert layer_windows(m) == expected
    uniform = len(set(expected)) == 1
    assert m.sliding_window == (expected[0] if uniform else None)
    assert (m.layer_windows is None) == uniform


@pytest.mark.parametrize("name", available_models())
@pytest.mark.parametrize("dtype", ["bf16", "int4"])
@pytest.mark.parametrize("block_size", [1, 16, 48])
def test_uniform_models_exact_equals_simulated(name: str, dtype: str, block_size: int) -> None:
    """Where every layer keeps the same tokens, the exact bytes are the simulator's."""
    m = load_model(name)
    for seq_len in (1, 1000, 5000, 40000):
        exact = kv_bytes_per_seq(m, dtype, seq_len, block_size=block_size)
        simulated = simulator_bytes_per_seq(m, dtype, seq_len, block_size=block_size)
        if is_mixed(m):
            assert exact <= simulated
        else:
            assert exact == simulated
        assert exact >= kv_bytes_per_token(m, dtype) * min(seq_len, min(
            w or seq_len for w in layer_windows(m)))


def test_fixture_file_roundtrip(tmp_path: Path) -> None:
    cfg = {**BASE, "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert layer_windows(load_model(str(path))) == (None, 64, 64, None)

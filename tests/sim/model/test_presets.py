"""Current open-model presets against their published parameter counts and KV bytes.

Published counts: the model cards and the checkpoints' safetensors totals (tied embeddings
counted once). Where a figure is exact (a safetensors total) the preset must match it to
the parameter; otherwise within 2%. KV bytes per token at bf16 are exact:
2 x layers x KV heads x head_dim x 2 bytes, MLA: layers x (kv_lora_rank + rope dim) x 2.
"""

from __future__ import annotations

import pytest

from sim.model.hf_config import available_models, load_model
from sim.model.spec import kv_bytes_per_token

B = 1_000_000_000

# name: (published total, published active or None, exact total or None, KV bytes/token bf16)
PUBLISHED = {
    "llama-3.1-8b": (8.03 * B, None, 8_030_261_248, 2 * 32 * 8 * 128 * 2),
    "llama-3.1-70b": (70.6 * B, None, 70_553_706_496, 2 * 80 * 8 * 128 * 2),
    "llama-3.1-405b": (405.9 * B, None, 405_853_388_800, 2 * 126 * 8 * 128 * 2),
    "qwen3-8b": (8.2 * B, None, None, 2 * 36 * 8 * 128 * 2),
    "qwen3-32b": (32.8 * B, None, None, 2 * 64 * 8 * 128 * 2),
    "qwen3-30b-a3b": (30.5 * B, 3.3 * B, None, 2 * 48 * 4 * 128 * 2),
    "qwen3-235b-a22b": (235 * B, 22 * B, None, 2 * 94 * 4 * 128 * 2),
    "gemma-2-9b": (9.24 * B, None, 9_241_705_984, 2 * 42 * 8 * 256 * 2),
    "gemma-2-27b": (27.2 * B, None, 27_227_128_320, 2 * 46 * 16 * 128 * 2),
    # Gemma-3: the card's 12.2B / 27.4B include the ~0.42B SigLIP vision tower kvsim leaves out
    "gemma-3-12b": (12.2 * B - 0.42 * B, None, None, 2 * 48 * 8 * 256 * 2),
    "gemma-3-27b": (27.4 * B - 0.42 * B, None, None, 2 * 62 * 16 * 128 * 2),
    "mixtral-8x7b": (46.7 * B, 12.9 * B, 46_702_792_704, 2 * 32 * 8 * 128 * 2),
    "deepseek-v3": (671 * B, 37 * B, None, 61 * (512 + 64) * 2),
    "llama-3.2-1b": (1.24 * B, None, 1_235_814_400, 2 * 16 * 8 * 64 * 2),
    "llama-3.2-3b": (3.21 * B, None, 3_212_749_824, 2 * 28 * 8 * 128 * 2),
    "llama-3.3-70b": (70.6 * B, None, 70_553_706_496, 2 * 80 * 8 * 128 * 2),
    "codellama-34b": (33.7 * B, None, None, 2 * 48 * 8 * 128 * 2),
    "qwen2.5-0.5b": (0.49 * B, None, None, 2 * 24 * 2 * 64 * 2),
    "qwen2.5-14b": (14.7 * B, None, None, 2 * 48 * 8 * 128 * 2),
    "qwen2.5-72b": (72.7 * B, None, None, 2 * 80 * 8 * 128 * 2),
    "qwen3-4b": (4.0 * B, None, None, 2 * 36 * 8 * 128 * 2),
    "qwen3-14b": (14.8 * B, None, None, 2 * 40 * 8 * 128 * 2),
    "mistral-nemo-12b": (12.2 * B, None, None, 2 * 40 * 8 * 128 * 2),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_matches_published_parameters_and_kv_bytes(name: str) -> None:
    total, active, exact, kv = PUBLISHED[name]
    model = load_model(name)
    assert model.num_params == pytest.approx(total, rel=0.02)
    if exact is not None:
        assert model.num_params == exact
    if active is None:
        assert model.num_active_params == model.num_params and not model.is_moe
    else:
        assert model.is_moe and model.num_active_params == pytest.approx(active, rel=0.02)
    value = kv_bytes_per_token(model, "bf16")
    assert value == kv and isinstance(value, int)


def test_preset_kv_bytes_table() -> None:
    """Every preset's bf16 KV bytes per token, as `sim kv` prints them (docs/guides/kv-memory.md)."""
    got = {n: kv_bytes_per_token(load_model(n), "bf16") for n in PUBLISHED}
    assert got == {"llama-3.1-8b": 131072, "llama-3.1-70b": 327680, "llama-3.1-405b": 516096,
                   "qwen3-8b": 147456, "qwen3-32b": 262144, "qwen3-30b-a3b": 98304,
                   "qwen3-235b-a22b": 192512, "gemma-2-9b": 344064, "gemma-2-27b": 376832,
                   "gemma-3-12b": 393216, "gemma-3-27b": 507904, "mixtral-8x7b": 131072,
                   "deepseek-v3": 70272, "llama-3.2-1b": 32768, "llama-3.2-3b": 114688,
                   "llama-3.3-70b": 327680, "codellama-34b": 196608, "qwen2.5-0.5b": 12288,
                   "qwen2.5-14b": 196608, "qwen2.5-72b": 327680, "qwen3-4b": 147456,
                   "qwen3-14b": 163840, "mistral-nemo-12b": 163840}


def test_every_preset_loads_and_is_listed() -> None:
    assert set(PUBLISHED) <= set(available_models())
    for name in available_models():
        assert load_model(name).num_params > 0

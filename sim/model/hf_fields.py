"""Reading config.json values: checked types and ranges, model-type traits and defaults,
per-layer attention windows and MoE layers. Every problem is one ConfigError naming the
file and the key; ``sim.model.hf_config`` assembles the ModelSpec from these.
"""

from __future__ import annotations

import reprlib
import sys
from typing import Any, Mapping

from sim.errors import ConfigError

#: model_type values whose layout kvsim knows; others are read as llama-style (warned).
KNOWN_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "gemma", "gemma2", "gemma3", "gemma3_text",
                     "llama", "mistral", "mixtral", "opt", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
QWEN_TYPES = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
GEMMA_SANDWICH = ("gemma2", "gemma3", "gemma3_text")  # four norms per layer
QK_NORM = ("qwen3", "qwen3_moe", "gemma3", "gemma3_text")

#: HuggingFace config-class defaults for keys real config.json files leave out (Gemma-3's
#: text_config relies on them: no head_dim, vocab_size or max_position_embeddings in 12B).
TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma2": {"head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192,
               "sliding_window": 4096},
    "gemma3_text": {"head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072,
                    "sliding_window": 4096, "sliding_window_pattern": 6},
    "qwen2_moe": {"shared_expert_intermediate_size": 5632},
}

_DIM = 1 << 20
#: inclusive [low, high] of each integer key: beyond them a config is broken, not big.
RANGES: dict[str, tuple[int, int]] = {
    "num_hidden_layers": (1, 4096), "hidden_size": (1, _DIM), "num_attention_heads": (1, 1 << 16),
    "num_key_value_heads": (1, 1 << 16), "head_dim": (1, 1 << 16), "intermediate_size": (1, 1 << 22),
    "ffn_dim": (1, 1 << 22), "vocab_size": (1, 1 << 24), "max_position_embeddings": (1, 1 << 30),
    "sliding_window": (1, 1 << 30), "sliding_window_size": (1, 1 << 30),
    "word_embed_proj_dim": (1, _DIM), "q_lora_rank": (1, _DIM), "kv_lora_rank": (1, _DIM),
    "qk_nope_head_dim": (1, 1 << 16), "qk_rope_head_dim": (1, 1 << 16), "v_head_dim": (1, 1 << 16),
    "n_routed_experts": (0, 1 << 16), "num_local_experts": (0, 1 << 16), "num_experts": (0, 1 << 16),
    "num_experts_per_tok": (1, 1 << 16), "moe_intermediate_size": (1, 1 << 22),
    "shared_expert_intermediate_size": (0, 1 << 22), "n_shared_experts": (0, 1 << 10),
    "first_k_dense_replace": (0, 4096), "moe_layer_freq": (1, 4096), "decoder_sparse_step": (1, 4096),
    "max_window_layers": (0, _DIM), "sliding_window_pattern": (1, 4096),
    "_sliding_window_pattern": (1, 4096),
}
_WARNED: set[tuple[str, str]] = set()
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


def show(value: Any) -> str:
    """A short one-line repr of a config value for an error message."""
    try:
        return _REPR.repr(value)
    except ValueError:  # an int too long for str()
        return "<an integer of thousands of digits>"


class Fields:
    """Checked access to one config.json's values (type-specific defaults filled in)."""

    def __init__(self, cfg: Mapping[str, Any], source: str, model_type: str) -> None:
        self.cfg = {**TYPE_DEFAULTS.get(model_type, {}), **cfg}
        self.source = source
        self.model_type = model_type

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(self.source, key, message)

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: Any = ...) -> Any:
        """An integer within RANGES[key]; ``default`` when missing or null (required if none)."""
        value = self.cfg.get(key)
        if value is None:
            if default is ...:
                raise self.error(key, "required key missing from the model config")
            return default
        low, high = RANGES.get(key, (1, 1 << 30))
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(key, f"expected int in [{low}, {high}], got {show(value)}")
        if not low <= value <= high:
            raise self.error(key, f"must be an integer in [{low}, {high}], got {show(value)}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {show(value)}")
        return value

    def str(self, key: str, default: str = "") -> str:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {show(value)}")
        return value

    def layer_list(self, key: str, num_layers: int) -> list[int]:
        """A list of layer indices in [0, num_layers) (e.g. mlp_only_layers)."""
        value = self.cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in value):
            raise self.error(key, f"expected a list of layer indices in [0, {num_layers}), got {show(value)}")
        return value


def warn_unknown_model_type(source: str, model_type: str) -> None:
    """One stderr line per (file, model_type) and process for a model_type kvsim does not know."""
    if (source, model_type) in _WARNED:
        return
    _WARNED.add((source, model_type))
    what = f"{show(model_type)} is not one kvsim knows" if model_type else "missing"
    print(f"warning: {source}: model_type: {what} ({', '.join(KNOWN_MODEL_TYPES)}); assumed a "
          "llama-style decoder (gated MLP, RMSNorm, no biases, sliding_window if set on every "
          "layer, layer_types if given)", file=sys.stderr)


def layer_windows(f: Fields, num_layers: int) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention), HuggingFace's rules:

    ``layer_types`` when given (``full_attention`` / ``sliding_attention``); Gemma-2: even
    layers slide; Gemma-3: every ``sliding_window_pattern``-th layer is full, the rest slide;
    Qwen2/3 (and MoE): layers from ``max_window_layers`` on slide, only with
    ``use_sliding_window: true``; otherwise ``sliding_window`` applies to every layer unless
    ``use_sliding_window`` is false (Mistral).
    """
    key = "sliding_window" if f.has("sliding_window") or not f.has("sliding_window_size") else "sliding_window_size"
    window = f.int(key, None)
    types = f.cfg.get("layer_types")
    if types is not None:
        allowed = ("full_attention", "sliding_attention")
        if not isinstance(types, list) or len(types) != num_layers or any(t not in allowed for t in types):
            raise f.error("layer_types", f"expected a list of {num_layers} entries (num_hidden_layers), "
                          f"each one of {', '.join(allowed)}; got {show(types)}")
        slides = [t == "sliding_attention" for t in types]
    elif f.model_type == "gemma2":
        slides = [i % 2 == 0 for i in range(num_layers)]
    elif f.model_type in ("gemma3", "gemma3_text"):
        pkey = "sliding_window_pattern" if f.has("sliding_window_pattern") else "_sliding_window_pattern"
        pattern = f.int(pkey, 6)
        slides = [(i + 1) % pattern != 0 for i in range(num_layers)]
    elif f.model_type in QWEN_TYPES:
        first = f.int("max_window_layers", 28) if f.bool("use_sliding_window", False) else num_layers
        slides = [i >= first for i in range(num_layers)]
    else:
        slides = [window is not None and f.bool("use_sliding_window", True)] * num_layers
    if any(slides) and window is None:
        raise f.error("sliding_window", "required: the config has sliding-window layers")
    return tuple(window if s else None for s in slides)


def moe_layer_indices(f: Fields, num_layers: int) -> tuple[int, ...] | None:
    """Qwen2/3-MoE's MoE layers: not in ``mlp_only_layers`` and (i + 1) % decoder_sparse_step == 0.
    None for other types (every layer, or DeepSeek's first_k_dense_replace / moe_layer_freq)."""
    if f.model_type not in ("qwen2_moe", "qwen3_moe"):
        return None
    step = f.int("decoder_sparse_step", 1)
    dense = set(f.layer_list("mlp_only_layers", num_layers))
    return tuple(i for i in range(num_layers) if i not in dense and (i + 1) % step == 0)


__all__ = ["Fields", "KNOWN_MODEL_TYPES", "RANGES", "TYPE_DEFAULTS", "layer_windows",
           "moe_layer_indices", "warn_unknown_model_type"]

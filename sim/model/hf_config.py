"""Model loading: preset names and HuggingFace ``config.json`` files into ModelSpecs.

Presets live in ``sim/data/models.yaml`` as verbatim subsets of each checkpoint's
config.json, so a preset name and a config.json path go through the one parser,
``spec_from_hf_config``.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Mapping

from sim.errors import ConfigError
from sim.model.spec import MlpKind, ModelSpec, NormKind

_PRESETS_PATH = Path(__file__).resolve().parent / "data" / "models.yaml"


@cache
def _presets() -> dict[str, dict[str, Any]]:
    import yaml  # noqa: PLC0415  (imported on first use: no work at import)

    with open(_PRESETS_PATH, encoding="utf-8") as f:
        return yaml.safe_load(f)


def available_models() -> list[str]:
    """Preset names accepted by ``load_model``, sorted."""
    return sorted(_presets())


def load_model(name_or_path: str, *, source: str = "<cli>", key: str = "model") -> ModelSpec:
    """A preset (case-insensitive name) or a HuggingFace config.json (file or its folder).

    Raises ConfigError(source, key, ...) for an unknown name, an unreadable file or a
    config.json missing a required key or holding a wrong type.
    """
    presets = _presets()
    lowered = name_or_path.strip().lower()
    if lowered in presets:
        return spec_from_hf_config(presets[lowered], name=lowered, source=str(_PRESETS_PATH))
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(source, key, f"cannot read HuggingFace config {path}: {exc}") from None
        if not isinstance(cfg, dict):
            raise ConfigError(str(path), "<root>", "a config.json must hold a JSON object")
        name = path.parent.name if path.name == "config.json" else path.stem
        return spec_from_hf_config(cfg, name=name or str(path), source=str(path))
    raise ConfigError(source, key, f"unknown model {name_or_path!r}; use one of: "
                      f"{', '.join(available_models())} or a path to a HuggingFace config.json")


def spec_from_hf_config(cfg: Mapping[str, Any], *, name: str, source: str) -> ModelSpec:
    """Build a ModelSpec from config.json keys (llama, mistral, qwen2, opt, deepseek_v2 style).

    Missing optional keys take HuggingFace's defaults (num_key_value_heads = heads,
    head_dim = hidden / heads, tie_word_embeddings = true). Qwen2's sliding_window only
    counts when use_sliding_window is true. Errors name ``source`` and the key.
    """
    def get(key: str, default: Any = ..., kind: type | tuple = int) -> Any:
        value = cfg.get(key)
        if value is None:
            if default is ...:
                raise ConfigError(source, key, "required key missing from the model config")
            return default
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(source, key, f"expected {getattr(kind, '__name__', kind)}, got {value!r}")
        if kind is int and value <= 0:
            raise ConfigError(source, key, f"must be a positive integer, got {value}")
        return value

    model_type = str(cfg.get("model_type", ""))
    is_opt = model_type == "opt"
    hidden, heads = get("hidden_size"), get("num_attention_heads")
    intermediate = get("ffn_dim") if is_opt else get("intermediate_size")
    window = get("sliding_window", None)
    if cfg.get("use_sliding_window") is False or (model_type == "qwen2" and not cfg.get("use_sliding_window")):
        window = None
    kv_lora_rank = get("kv_lora_rank", None)
    head_dim = get("head_dim", None) or hidden // heads
    if kv_lora_rank is not None:
        head_dim = get("qk_nope_head_dim") + get("qk_rope_head_dim")
    max_pos = get("max_position_embeddings", None)
    num_experts = get("n_routed_experts", None) or get("num_local_experts", None) or 0
    try:
        return ModelSpec(
            name=name, num_layers=get("num_hidden_layers"), hidden_size=hidden,
            num_attention_heads=heads, num_kv_heads=get("num_key_value_heads", heads),
            head_dim=head_dim, intermediate_size=intermediate, vocab_size=get("vocab_size"),
            tie_word_embeddings=get("tie_word_embeddings", True, bool),
            sliding_window=window, max_position_embeddings=max_pos,
            mlp=MlpKind.PLAIN if is_opt else MlpKind.GATED,
            norm=NormKind.LAYER if is_opt else NormKind.RMS,
            qkv_bias=(model_type == "qwen2" or get("attention_bias", False, bool)
                      or (is_opt and get("enable_bias", True, bool))),
            linear_bias=is_opt and get("enable_bias", True, bool),
            num_learned_positions=(max_pos + 2) if is_opt and max_pos else 0,
            word_embed_proj_dim=get("word_embed_proj_dim", None),
            q_lora_rank=get("q_lora_rank", None), kv_lora_rank=kv_lora_rank,
            qk_nope_head_dim=get("qk_nope_head_dim", None),
            qk_rope_head_dim=get("qk_rope_head_dim", None), v_head_dim=get("v_head_dim", None),
            num_experts=num_experts,
            num_experts_per_tok=get("num_experts_per_tok", 0) if num_experts else 0,
            moe_intermediate_size=get("moe_intermediate_size", None) or (intermediate if num_experts else None),
            num_shared_experts=get("n_shared_experts", 0) if num_experts else 0,
            first_k_dense_replace=cfg.get("first_k_dense_replace") or 0,
            moe_layer_freq=get("moe_layer_freq", 1),
        )
    except ValueError as exc:
        raise ConfigError(source, "<root>", str(exc)) from None

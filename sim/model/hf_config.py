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

from sim.errors import ConfigError, did_you_mean
from sim.model.hf_fields import (
    GEMMA_SANDWICH, KNOWN_MODEL_TYPES, QK_NORM, Fields, layer_windows, moe_layer_indices,
    warn_unknown_model_type)
from sim.model.layers import moe_layer_flags
from sim.model.spec import MlpKind, ModelSpec, NormKind

_PRESETS_PATH = Path(__file__).resolve().parent / "data" / "models.yaml"
MAX_CONFIG_BYTES = 16 << 20  # a config.json is a few KB; refuse to read a mistaken huge file


@cache
def _presets() -> dict[str, dict[str, Any]]:
    import yaml  # noqa: PLC0415  (imported on first use: no work at import)

    # The shipped presets (not user input): libyaml's safe loader where PyYAML has it, the same
    # objects four times faster than the pure-Python one (every command reads them, ~30 ms).
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(_PRESETS_PATH, encoding="utf-8") as f:
        return yaml.load(f, Loader=loader)  # noqa: S506 -- a safe loader


def available_models() -> list[str]:
    """Preset names accepted by ``load_model``, sorted."""
    return sorted(_presets())


def config_file(name_or_path: str) -> Path | None:
    """The config.json a model reference names (a file, or the folder holding it), or None for
    a preset name or a path that is no file."""
    if name_or_path.strip().lower() in _presets():
        return None
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    return path if path.is_file() else None


#: Suffixes of a Hugging Face id that name a fine-tune of the same architecture (the KV cache,
#: weights and kernels are the base model's): ``meta-llama/Llama-3.1-8B-Instruct`` is llama-3.1-8b.
_FINE_TUNE_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base")


def hub_id_preset(name: str, presets) -> str | None:
    """The preset a Hugging Face id (``org/Model-Name[-Instruct]``) names, or None: the part after
    the organisation, lower case, without fine-tune suffixes and a ``meta-`` prefix."""
    if "/" not in name or name.count("/") != 1:
        return None
    base = _hub_base(name)
    for candidate in (base, base.removeprefix("meta-")):
        if candidate in presets:
            return candidate
    return None


def _hub_base(name: str) -> str:
    """A Hugging Face id's model part, lower case, without fine-tune suffixes."""
    base = name.split("/")[-1].strip().lower().replace("-instruct-", "-").replace("-chat-", "-")
    changed = True
    while changed:
        changed = False
        for suffix in _FINE_TUNE_SUFFIXES:
            if base.endswith(suffix):
                base, changed = base[: -len(suffix)], True
    return base


def load_model(name_or_path: str, *, source: str = "<cli>", key: str = "model") -> ModelSpec:
    """A preset (case-insensitive name) or a HuggingFace config.json (file or its folder).

    Raises ConfigError(source, key, ...) for an unknown name, an unreadable file or a
    config.json missing a required key or holding a wrong type.
    """
    presets = _presets()
    lowered = name_or_path.strip().lower()
    if lowered in presets:
        return spec_from_hf_config(presets[lowered], name=lowered, source=str(_PRESETS_PATH))
    path = config_file(name_or_path)
    preset = hub_id_preset(name_or_path, presets) if path is None else None
    if preset is not None:
        return spec_from_hf_config(presets[preset], name=preset, source=str(_PRESETS_PATH))
    if path is not None:
        try:
            if path.stat().st_size > MAX_CONFIG_BYTES:
                raise ValueError(f"larger than {MAX_CONFIG_BYTES} bytes: not a config.json")
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints, deep nesting
            raise ConfigError(source, key, f"cannot read HuggingFace config {path}: {exc}") from None
        if not isinstance(cfg, dict):
            raise ConfigError(str(path), "<root>", "a config.json must hold a JSON object")
        name = path.parent.name if path.name == "config.json" else path.stem
        return spec_from_hf_config(cfg, name=name or str(path), source=str(path))
    raise ConfigError(source, key, f"unknown model {name_or_path!r}{did_you_mean(_hub_base(lowered), presets)}; use one of: "
                      f"{', '.join(available_models())} or a path to a HuggingFace config.json")


#: rope_scaling types that stretch the context past max_position_embeddings by their factor, as
#: vLLM's _get_and_verify_max_len counts them (YaRN from original_max_position_embeddings, as
#: Qwen's configs enable it; dynamic NTK). Others are left as the config says: Llama 3.1's llama3,
#: Phi-3's su/longrope, and linear, whose configs already state the stretched length (Gemma 3:
#: 131072 with factor 8), so a 1M-token context is never read into them.
_STRETCHING_ROPE = ("yarn", "dynamic")


def derived_context_len(cfg: Mapping[str, Any], max_pos: int | None) -> int | None:
    """The context length a config allows, as vLLM's ``_get_and_verify_max_len`` derives it."""
    rs = cfg.get("rope_scaling")
    if max_pos is None or not isinstance(rs, dict):
        return max_pos
    kind, factor = rs.get("rope_type", rs.get("type")), rs.get("factor")
    if (kind not in _STRETCHING_ROPE or "mrope_section" in rs or isinstance(factor, bool)
            or not isinstance(factor, (int, float)) or not 1.0 <= factor <= 1024.0):
        return max_pos
    base = rs.get("original_max_position_embeddings") if kind == "yarn" else max_pos
    if not isinstance(base, int) or isinstance(base, bool) or not 1 <= base <= max(max_pos, 1 << 24):
        base = max_pos
    return int(base * factor)


def spec_from_hf_config(cfg: Mapping[str, Any], *, name: str, source: str) -> ModelSpec:
    """Build a ModelSpec from config.json keys (llama, mistral, mixtral, qwen2/3 and their
    MoE, gemma/2/3, opt, deepseek_v2/v3 style; a multimodal config's ``text_config``).

    Missing optional keys take HuggingFace's defaults (num_key_value_heads = heads,
    head_dim = hidden / heads, tie_word_embeddings = true, the config class's for Gemma).
    Per-layer windows and MoE layers follow hf_fields. Every problem is one ConfigError
    naming ``source`` and the key; an unknown model_type is read llama-style, with a warning.
    """
    text = cfg.get("text_config")
    if isinstance(text, dict) and "num_hidden_layers" not in cfg:  # Gemma-3: a vision-language config
        cfg = {"model_type": cfg.get("model_type"), **text}
    model_type = Fields(cfg, source, "").str("model_type")
    if model_type not in KNOWN_MODEL_TYPES:
        warn_unknown_model_type(source, model_type)
    f = Fields(cfg, source, model_type)
    is_opt = model_type == "opt"
    num_layers, hidden, heads = f.int("num_hidden_layers"), f.int("hidden_size"), f.int("num_attention_heads")
    intermediate = f.int("ffn_dim") if is_opt else f.int("intermediate_size")
    vocab = f.int("vocab_size")
    kv_lora_rank = f.int("kv_lora_rank", None)
    num_kv_heads = f.int("num_key_value_heads", heads)
    if kv_lora_rank is not None:
        head_dim = f.int("qk_nope_head_dim") + f.int("qk_rope_head_dim")
        f.int("v_head_dim")
    else:
        if heads % num_kv_heads:
            raise f.error("num_key_value_heads", f"must divide num_attention_heads ({heads}), got {num_kv_heads}")
        head_dim = f.int("head_dim", None)
        if head_dim is None:
            if hidden % heads:
                raise f.error("hidden_size", f"must be a multiple of num_attention_heads ({heads}) "
                              f"when head_dim is not given, got {hidden}")
            head_dim = hidden // heads
    windows = layer_windows(f, num_layers)
    max_pos = f.int("max_position_embeddings", None)
    moe = _moe_fields(f, num_layers, intermediate)
    try:
        return ModelSpec(
            name=name, num_layers=num_layers, hidden_size=hidden,
            num_attention_heads=heads, num_kv_heads=num_kv_heads,
            head_dim=head_dim, intermediate_size=intermediate, vocab_size=vocab,
            tie_word_embeddings=f.bool("tie_word_embeddings", True),
            sliding_window=windows[0] if len(set(windows)) == 1 else None,
            layer_windows=windows if len(set(windows)) > 1 else None,
            max_position_embeddings=max_pos, max_context_tokens=derived_context_len(f.cfg, max_pos),
            mlp=MlpKind.PLAIN if is_opt else MlpKind.GATED,
            norm=NormKind.LAYER if is_opt else NormKind.RMS,
            norms_per_layer=4 if model_type in GEMMA_SANDWICH else 2, qk_norm=model_type in QK_NORM,
            qkv_bias=(model_type in ("qwen2", "qwen2_moe") or f.bool("attention_bias", False)
                      or (is_opt and f.bool("enable_bias", True))),
            linear_bias=is_opt and f.bool("enable_bias", True),
            num_learned_positions=(max_pos + 2) if is_opt and max_pos else 0,
            word_embed_proj_dim=f.int("word_embed_proj_dim", None),
            q_lora_rank=f.int("q_lora_rank", None), kv_lora_rank=kv_lora_rank,
            qk_nope_head_dim=f.int("qk_nope_head_dim", None),
            qk_rope_head_dim=f.int("qk_rope_head_dim", None), v_head_dim=f.int("v_head_dim", None),
            **moe,
        )
    except ValueError as exc:  # a combination the checks above missed: still one line
        raise ConfigError(source, "<root>", str(exc)) from None


def _moe_fields(f: Fields, num_layers: int, intermediate: int) -> dict[str, Any]:
    """ModelSpec's MoE fields: Mixtral (num_local_experts), Qwen2/3-MoE (num_experts,
    shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers), DeepSeek
    (n_routed_experts, n_shared_experts, first_k_dense_replace, moe_layer_freq). A config
    whose rules leave no MoE layer is dense."""
    key = next((k for k in ("n_routed_experts", "num_local_experts", "num_experts") if f.has(k)), None)
    num_experts = f.int(key, 0) if key else 0
    if not num_experts:
        return {}
    top_k = f.int("num_experts_per_tok")
    if top_k > num_experts:
        raise f.error("num_experts_per_tok", f"must be at most {key} ({num_experts}), got {top_k}")
    moe_inter = f.int("moe_intermediate_size", None) or intermediate
    out: dict[str, Any] = dict(
        num_experts=num_experts, num_experts_per_tok=top_k, moe_intermediate_size=moe_inter,
        num_shared_experts=f.int("n_shared_experts", 0),
        first_k_dense_replace=f.int("first_k_dense_replace", 0), moe_layer_freq=f.int("moe_layer_freq", 1),
        moe_layer_indices=moe_layer_indices(f, num_layers),
        router_bias=f.str("topk_method") == "noaux_tc")
    shared = f.int("shared_expert_intermediate_size", 0) if f.model_type in ("qwen2_moe", "qwen3_moe") else 0
    if shared:
        out |= dict(shared_expert_intermediate_size=shared, shared_expert_gate=f.model_type == "qwen2_moe",
                    num_shared_experts=-(-shared // moe_inter))
    if not any(moe_layer_flags(num_layers, num_experts=num_experts,
                               first_k_dense_replace=out["first_k_dense_replace"],
                               moe_layer_freq=out["moe_layer_freq"],
                               moe_layer_indices=out["moe_layer_indices"])):
        return {}
    return out

"""Tensor parallelism: what one GPU of a ``tp``-GPU replica holds and computes.

vLLM's tensor parallelism (Megatron-style) splits every layer over ``tp`` GPUs:

- column-parallel: the QKV projection and the MLP's gate/up split their output features
  (each GPU computes its heads' q, k, v and its slice of the intermediate);
- row-parallel: the attention output projection (O) and the MLP's down split their input
  features; each GPU's partial sums are all-reduced (one all-reduce after attention and one
  after the MLP, per layer, of tokens x hidden activations);
- vocab-parallel: the embedding and the lm_head split the vocabulary (ceil(vocab / tp) rows
  per GPU); the logits are gathered once per step;
- attention heads split evenly (tp must divide num_attention_heads); KV heads split too,
  and when num_kv_heads < tp each GPU holds max(1, num_kv_heads // tp) = 1 KV head,
  replicated over tp / num_kv_heads GPUs (num_kv_heads must then divide tp); MLA's latent
  (one per token, no heads) is replicated on every GPU, as are MLA's q_a / kv_a
  projections, the norms and a MoE router;
- MoE: vLLM's default (no expert parallelism) keeps every expert on every GPU and splits
  each expert's intermediate dimension (ceil(moe_intermediate_size / tp)), shared experts
  likewise.

``shard_model`` returns a ModelSpec of one GPU's share, so the memory plan and the cost
models run their single-GPU arithmetic on it unchanged. It is only ever called with tp > 1:
with tp = 1 everything uses the model itself.

Pipeline parallelism (``pipeline_parallel_size`` = pp > 1) splits the layers into pp stages
of consecutive layers, each stage on tp GPUs (tp x pp GPUs per replica). ``stage_layers``
is vLLM's default split (``get_pp_indices`` in vllm/distributed/utils.py, vllm-project/vllm
at 5a6541db): num_layers // pp layers each, and the remainder r one extra layer each to the
stages just before the last (stage pp-2, pp-3, ..., pp-1-r: never the last stage, which also
runs the final norm and the lm_head; with r <= pp - 2 never the first either, which holds
the embedding); ``VLLM_PP_LAYER_PARTITION`` overrides it in vLLM (not modelled). The first
stage holds the (vocab-parallel) embedding, the last the lm_head, and with tied embeddings
the last stage holds its own copy of the embedding to serve as the lm_head (vLLM's models
build ``embed_tokens`` on ``is_first_rank or (tie_word_embeddings and is_last_rank)``, e.g.
vllm/model_executor/models/llama.py ``LlamaModel``). ``stage_model`` is the ModelSpec of a
stage's layers (its embedding and lm_head still counted: ``stage_weight_bytes`` takes away
those the stage does not hold).
"""

from __future__ import annotations

import dataclasses
import math

from sim.errors import ConfigError
from sim.model.layers import moe_layer_flags
from sim.model.spec import ModelSpec, NormKind
from sim.model.weights import embedding_params, split_weight_bytes

#: The tensor-parallel sizes a scenario may ask for (vLLM's ``tensor_parallel_size``: one node).
TP_SIZES = (1, 2, 4, 8)
TP_KEY = "engine.tensor_parallel_size"
#: The pipeline-parallel sizes a scenario may ask for (vLLM's ``pipeline_parallel_size``).
PP_SIZES = (1, 2, 4, 8)
PP_KEY = "engine.pipeline_parallel_size"


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads one GPU holds: num_kv_heads // tp, at least 1 (replicated when fewer than tp)."""
    return max(1, model.num_kv_heads // tp)


def _splits(model: ModelSpec, tp: int) -> bool:
    """Whether vLLM can split ``model``'s heads over ``tp`` GPUs."""
    H, kv = model.num_attention_heads, model.num_kv_heads
    return H % tp == 0 and (model.is_mla or (kv % tp == 0 if tp <= kv else tp % kv == 0))


def check_tensor_parallel(model: ModelSpec, tp: int, source: str = "<cli>", key: str = TP_KEY) -> None:
    """Raise ConfigError(source, key, ...) unless ``model`` can be split over ``tp`` GPUs as vLLM
    splits it: tp in TP_SIZES, tp divides num_attention_heads, and tp divides num_kv_heads
    (tp <= num_kv_heads) or num_kv_heads divides tp (the KV heads are replicated)."""
    if tp not in TP_SIZES:
        raise ConfigError(source, key, f"got {tp!r}; allowed: {', '.join(map(str, TP_SIZES))}")
    if _splits(model, tp):
        return
    allowed = ", ".join(str(t) for t in TP_SIZES if _splits(model, t))
    H, kv = model.num_attention_heads, model.num_kv_heads
    if H % tp:
        why = f"{tp} does not divide {model.name}'s {H} attention heads"
    else:
        why = (f"{model.name}'s {kv} KV heads cannot be split over {tp} GPUs (tp must divide them,"
               " or they must divide tp)")
    raise ConfigError(source, key, f"{why}; allowed for this model: {allowed}")


def shard_model(model: ModelSpec, tp: int, attention_dp: bool = False) -> ModelSpec:
    """The share of ``model`` one GPU of a ``tp``-way tensor-parallel replica holds (see the
    module docstring); ``model`` itself for tp = 1. Call ``check_tensor_parallel`` first.
    ``attention_dp``: attention data-parallel over the tp GPUs (``engine.attention_data_parallel``):
    every GPU keeps all attention heads (and its own requests' KV), the MLP, experts and
    vocabulary stay split."""
    if tp == 1:
        return model

    def split(n: int | None) -> int | None:
        return None if n is None else math.ceil(n / tp)

    heads = (model.num_attention_heads, model.num_kv_heads) if attention_dp else (
        model.num_attention_heads // tp, kv_heads_per_gpu(model, tp))
    return dataclasses.replace(
        model, name=f"{model.name} (1/{tp}{', attention data-parallel' if attention_dp else ''})",
        num_attention_heads=heads[0], num_kv_heads=heads[1],
        intermediate_size=split(model.intermediate_size), vocab_size=split(model.vocab_size),
        moe_intermediate_size=split(model.moe_intermediate_size),
        shared_expert_intermediate_size=split(model.shared_expert_intermediate_size))


def check_pipeline_parallel(model: ModelSpec, pp: int, source: str = "<cli>", key: str = PP_KEY) -> None:
    """Raise ConfigError(source, key, ...) unless pp is in PP_SIZES and at most the model's layers."""
    if isinstance(pp, bool) or pp not in PP_SIZES:
        raise ConfigError(source, key, f"got {pp!r}; allowed: {', '.join(map(str, PP_SIZES))}")
    if pp > model.num_layers:
        allowed = ", ".join(str(p) for p in PP_SIZES if p <= model.num_layers)
        raise ConfigError(source, key, (f"{pp} stages for {model.name}'s {model.num_layers} layers: every stage"
                                        f" needs a layer; allowed for this model: {allowed}"))


def stage_layers(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per stage, first to last: vLLM's default split (module docstring)."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_model(model: ModelSpec, start: int, end: int) -> ModelSpec:
    """``model`` cut to its layers ``start`` to ``end`` (exclusive): per-layer windows and MoE
    layers keep their places; the embedding and lm_head stay in the spec."""
    if (start, end) == (0, model.num_layers):
        return model
    flags = moe_layer_flags(model.num_layers, num_experts=model.num_experts,
                            first_k_dense_replace=model.first_k_dense_replace,
                            moe_layer_freq=model.moe_layer_freq, moe_layer_indices=model.moe_layer_indices)
    moe = tuple(i - start for i in range(start, end) if flags[i]) if model.is_moe else None
    windows = model.layer_windows[start:end] if model.layer_windows is not None else None
    return dataclasses.replace(
        model, name=f"{model.name} (layers {start}-{end - 1})", num_layers=end - start, layer_windows=windows,
        moe_layer_indices=moe, first_k_dense_replace=0 if model.is_moe else model.first_k_dense_replace,
        moe_layer_freq=1 if model.is_moe else model.moe_layer_freq)


def stage_models(model: ModelSpec, pp: int) -> tuple[ModelSpec, ...]:
    """The ModelSpec of every stage's layers (``(model,)`` for pp = 1)."""
    out, start = [], 0
    for n in stage_layers(model.num_layers, pp):
        out.append(stage_model(model, start, start + n))
        start += n
    return tuple(out)


def stage_weight_bytes(stage: ModelSpec, index: int, pp: int, dtype_bytes: float = 2,
                       embedding_bytes: float | None = None) -> int:
    """Bytes of the weights one GPU of stage ``index`` (of ``pp``) holds: ``stage`` is its layers'
    spec (sharded for tensor parallelism), less the embedding unless it is the first stage (or the
    last with tied embeddings) and less the lm_head and the final norm unless it is the last.
    The embedding and lm_head are charged as ``weight_bytes`` charges them."""
    params = stage.num_params
    embed, head = embedding_params(stage)
    first, last = index == 0, index == pp - 1
    if not (first or (last and stage.tie_word_embeddings)):
        params -= embed
        embed = 0
    if not last:  # the lm_head and the final norm
        params -= head + stage.hidden_size * (2 if stage.norm is NormKind.LAYER else 1)
        head = 0
    return split_weight_bytes(params, embed, head, dtype_bytes, embedding_bytes)


__all__ = ["PP_KEY", "PP_SIZES", "TP_KEY", "TP_SIZES", "check_pipeline_parallel", "check_tensor_parallel",
           "embedding_params", "kv_heads_per_gpu", "shard_model", "stage_layers", "stage_model", "stage_models",
           "stage_weight_bytes"]

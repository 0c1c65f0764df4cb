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
"""

from __future__ import annotations

import dataclasses
import math

from sim.errors import ConfigError
from sim.model.spec import ModelSpec

#: The tensor-parallel sizes a scenario may ask for (vLLM's ``tensor_parallel_size``: one node).
TP_SIZES = (1, 2, 4, 8)
TP_KEY = "engine.tensor_parallel_size"


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


def shard_model(model: ModelSpec, tp: int) -> ModelSpec:
    """The share of ``model`` one GPU of a ``tp``-way tensor-parallel replica holds (see the
    module docstring); ``model`` itself for tp = 1. Call ``check_tensor_parallel`` first."""
    if tp == 1:
        return model

    def split(n: int | None) -> int | None:
        return None if n is None else math.ceil(n / tp)

    return dataclasses.replace(
        model, name=f"{model.name} (1/{tp})",
        num_attention_heads=model.num_attention_heads // tp, num_kv_heads=kv_heads_per_gpu(model, tp),
        intermediate_size=split(model.intermediate_size), vocab_size=split(model.vocab_size),
        moe_intermediate_size=split(model.moe_intermediate_size),
        shared_expert_intermediate_size=split(model.shared_expert_intermediate_size))


__all__ = ["TP_KEY", "TP_SIZES", "check_tensor_parallel", "kv_heads_per_gpu", "shard_model"]

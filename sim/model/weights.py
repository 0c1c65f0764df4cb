"""Weight bytes: what a checkpoint's parameters occupy on a GPU at a weight dtype.

Quantized checkpoints (FP8, AWQ/GPTQ int4, NVFP4, MXFP4) quantize the transformer layers'
linear weights and keep the token embedding table and the lm_head in 16 bits
(``sim.model.dtypes.embedding_dtype``). vLLM's startup logs show it: Qwen3-8B-FP8 "Model loading
took 8.8 GiB" and Qwen2.5-14B-Instruct-FP8-dynamic 15.22 GiB, against 8.79 and 15.21 GiB by this
rule and 7.63 and 13.76 GiB with every parameter in fp8.
"""

from __future__ import annotations

import math

from sim.model.dtypes import DTYPE_BYTES, dtype_name, embedding_dtype
from sim.model.spec import ModelSpec


def embedding_params(model: ModelSpec) -> tuple[int, int]:
    """(embedding parameters, lm_head parameters) of ``model`` (a shard's: its vocabulary slice);
    the lm_head is 0 with tied embeddings (the spec counts the shared matrix once)."""
    embed = model.vocab_size * model.embed_dim + model.num_learned_positions * model.hidden_size
    if model.embed_dim != model.hidden_size:  # OPT project_in / project_out
        embed += 2 * model.embed_dim * model.hidden_size
    return embed, 0 if model.tie_word_embeddings else model.vocab_size * model.embed_dim


def split_weight_bytes(params: int, embed: int, head: int, dtype_bytes: float,
                       embedding_bytes: float | None = None) -> int:
    """Bytes of ``params`` parameters, of which ``embed`` are the token embedding table and
    ``head`` the lm_head, both at ``embedding_bytes`` (None: 16-bit under quantized weights,
    the weights' own otherwise), the rest at ``dtype_bytes`` (rounded up)."""
    vocab = DTYPE_BYTES[embedding_dtype(dtype_name(dtype_bytes))] if embedding_bytes is None else embedding_bytes
    return math.ceil((params - embed - head) * dtype_bytes + (embed + head) * vocab)


def weight_bytes(model: ModelSpec, dtype_bytes: float = 2, embedding_bytes: float | None = None) -> int:
    """Bytes the weights occupy: the transformer layers at ``dtype_bytes`` per parameter, the
    embedding table and the lm_head at ``embedding_bytes`` (``split_weight_bytes``); every
    parameter at ``dtype_bytes`` for 16- and 32-bit weights by default."""
    embed, head = embedding_params(model)
    return split_weight_bytes(model.num_params, embed, head, dtype_bytes, embedding_bytes)


__all__ = ["embedding_params", "split_weight_bytes", "weight_bytes"]

"""Building blocks of ``ModelSpec`` that need no ModelSpec: layer kinds, the GEMM record,
which layers are MoE, and the shape checks ``ModelSpec.__post_init__`` runs.

``sim.model.spec`` re-exports ``MlpKind``, ``NormKind`` and ``LinearOp``; import them from
there. This module imports nothing of kvsim, so ``spec`` can sit on top of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class MlpKind(StrEnum):
    """``gated``: down(silu(gate(x)) * up(x)) (llama family). ``plain``: fc2(relu(fc1(x))) (OPT)."""

    GATED = "gated"
    PLAIN = "plain"


class NormKind(StrEnum):
    RMS = "rms"  # weight only
    LAYER = "layer"  # weight and bias


@dataclass(frozen=True)
class LinearOp:
    """One weight matrix applied to the tokens of a step: y[m, n] = x[m, k] @ W[k, n].

    Present in ``num_layers`` layers. A routed-expert op has ``num_experts`` copies of W,
    of which each token uses ``experts_per_tok``; dense ops have 1 and 1.
    """

    name: str
    k: int
    n: int
    num_layers: int
    num_experts: int = 1
    experts_per_tok: int = 1


def moe_layer_flags(num_layers: int, *, num_experts: int, first_k_dense_replace: int = 0,
                    moe_layer_freq: int = 1, moe_layer_indices: tuple[int, ...] | None = None
                    ) -> tuple[bool, ...]:
    """Which layers are MoE: the listed ``moe_layer_indices`` (Qwen2/3-MoE's
    ``decoder_sparse_step`` and ``mlp_only_layers``, resolved by the config reader), else
    DeepSeek's rule: ``i >= first_k_dense_replace and i % moe_layer_freq == 0``."""
    if num_experts <= 0:
        return (False,) * num_layers
    if moe_layer_indices is not None:
        chosen = set(moe_layer_indices)
        return tuple(i in chosen for i in range(num_layers))
    return tuple(i >= first_k_dense_replace and i % moe_layer_freq == 0 for i in range(num_layers))


def window_groups(windows: tuple[int | None, ...]) -> tuple[tuple[int | None, int], ...]:
    """``(window, number of layers)`` pairs of per-layer windows, full attention (None) first,
    then windows from the largest: ``(None, 4096, None)`` -> ``((None, 2), (4096, 1))``."""
    counts: dict[int | None, int] = {}
    for w in windows:
        counts[w] = counts.get(w, 0) + 1
    return tuple(sorted(counts.items(), key=lambda item: -1 if item[0] is None else 1 / item[0]))


def check_shapes(spec: Any) -> None:
    """Raise ValueError unless ``spec``'s shapes are consistent (ModelSpec.__post_init__)."""
    for f in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
              "head_dim", "intermediate_size", "vocab_size", "norms_per_layer"):
        if getattr(spec, f) <= 0:
            raise ValueError(f"{f} must be positive, got {getattr(spec, f)}")
    if spec.sliding_window is not None and spec.sliding_window <= 0:
        raise ValueError(f"sliding_window must be positive or None, got {spec.sliding_window}")
    if spec.layer_windows is not None:
        if len(spec.layer_windows) != spec.num_layers:
            raise ValueError(f"layer_windows has {len(spec.layer_windows)} entries for "
                             f"{spec.num_layers} layers")
        if any(w is not None and w <= 0 for w in spec.layer_windows):
            raise ValueError("layer_windows entries must be positive or None")
        if spec.sliding_window is not None:
            raise ValueError("set sliding_window (every layer) or layer_windows (per layer), not both")
    if spec.kv_lora_rank is not None and None in (spec.qk_nope_head_dim, spec.qk_rope_head_dim,
                                                  spec.v_head_dim):
        raise ValueError("MLA needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
    if spec.num_experts > 0:
        if spec.num_experts_per_tok <= 0 or not spec.moe_intermediate_size:
            raise ValueError("MoE needs num_experts_per_tok and moe_intermediate_size")
        if spec.num_experts_per_tok > spec.num_experts:
            raise ValueError(f"num_experts_per_tok ({spec.num_experts_per_tok}) exceeds "
                             f"num_experts ({spec.num_experts})")
    if spec.moe_layer_indices is not None and any(
            not 0 <= i < spec.num_layers for i in spec.moe_layer_indices):
        raise ValueError(f"moe_layer_indices must lie in [0, {spec.num_layers})")


__all__ = ["LinearOp", "MlpKind", "NormKind", "check_shapes", "moe_layer_flags", "window_groups"]

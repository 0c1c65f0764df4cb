"""Per-layer attention: which layers keep how many tokens, and a sequence's exact KV bytes.

Full-attention layers keep every token of a sequence; a sliding-window layer keeps only its
last ``window`` tokens. Mistral-7B-v0.1 slides every layer over 4096 tokens; Gemma-2
alternates sliding (4096) and full layers; Gemma-3 has five sliding (1024) layers to one
full one. The exact KV of a sequence of ``n`` tokens, each layer in whole blocks::

    sum over layers l:  ceil(min(n, window_l) / block_size) x block_size x bytes_per_token_per_layer

(layers with the same window share blocks: one block holds ``block_size`` tokens of all of
them). That is what an allocator freeing each layer's blocks past its window needs (vLLM
v1's hybrid KV cache manager, ignoring how it pads groups of layers to one size).

The simulator's allocator has one slot per token for all layers, so for a model whose
layers differ it keeps every token in every layer (``simulator_bytes_per_seq``): vLLM
without the hybrid manager (v0, or ``--disable-hybrid-kv-cache-manager``). A window every
layer shares is simulated exactly (the sliding-window token budget).
"""

from __future__ import annotations

import math
from fractions import Fraction

from sim.model.dtypes import KVDtype
from sim.model.layers import window_groups
from sim.model.spec import ModelSpec, kv_bytes_per_token, max_kv_tokens_per_seq


def layer_windows(model: ModelSpec) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention)."""
    return model.layer_windows or (model.sliding_window,) * model.num_layers


def attention_layers(model: ModelSpec) -> list[dict[str, int | None]]:
    """``[{"window": None, "layers": 21}, {"window": 4096, "layers": 21}]``: full first."""
    return [{"window": w, "layers": n} for w, n in window_groups(layer_windows(model))]


def kv_bytes_per_seq(model: ModelSpec, kv_dtype: KVDtype | str, seq_len: int, *, block_size: int,
                     quant_group_size: int = 64) -> int:
    """Exact KV bytes of one ``seq_len``-token sequence, each layer capped at its window and
    rounded up to whole blocks (a group of layers with one window shares blocks)."""
    per_layer = Fraction(kv_bytes_per_token(model, kv_dtype, quant_group_size=quant_group_size))
    per_layer /= model.num_layers
    total = 0
    for window, layers in window_groups(layer_windows(model)):
        tokens = seq_len if window is None else min(seq_len, window)
        total += math.ceil(tokens / block_size) * math.ceil(per_layer * layers * block_size)
    return total


def simulator_bytes_per_seq(model: ModelSpec, kv_dtype: KVDtype | str, seq_len: int, *,
                            block_size: int, quant_group_size: int = 64) -> int:
    """What the simulator reserves for one ``seq_len``-token sequence: one slot of every
    layer per kept token (kept: min(seq_len, a window all layers share))."""
    per_block = math.ceil(kv_bytes_per_token(model, kv_dtype, quant_group_size=quant_group_size)
                          * block_size)
    return math.ceil(max_kv_tokens_per_seq(model, seq_len) / block_size) * per_block


def is_mixed(model: ModelSpec) -> bool:
    """True when layers keep different numbers of tokens (the simulator over-counts then)."""
    return len(set(layer_windows(model))) > 1


__all__ = ["attention_layers", "is_mixed", "kv_bytes_per_seq", "layer_windows", "simulator_bytes_per_seq"]

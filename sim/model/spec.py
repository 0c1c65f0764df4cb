"""Model shapes: what a checkpoint costs in weights, KV cache bytes and FLOPs.

A ``ModelSpec`` is the handful of config.json numbers that decide memory and compute.
Presets live in ``sim/data/models.yaml`` as verbatim subsets of each checkpoint's
HuggingFace config.json, so ``load_model("llama-3-8b")`` and
``load_model("path/to/config.json")`` go through the one parser, ``spec_from_hf_config``.

KV cache bytes per token (the number everything else is built on)::

    standard / GQA attention:  2 (K and V) x num_layers x num_kv_heads x head_dim x bytes_per_element
    MLA (DeepSeek-V2/V3):      num_layers x (kv_lora_rank + qk_rope_head_dim) x bytes_per_element

MLA caches one compressed latent per layer and token instead of K and V; e.g.
deepseek-v2-lite at bf16 is 27 x 576 x 2 = 31,104 bytes per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.model.dtypes import KVDtype
from sim.model.layers import LinearOp, MlpKind, NormKind, check_shapes, moe_layer_flags


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer. Counts are per model unless named per layer.

    MLA models set ``kv_lora_rank`` (then ``qk_nope_head_dim``, ``qk_rope_head_dim``,
    ``v_head_dim`` are required and ``head_dim`` is nope + rope). MoE models set
    ``num_experts`` > 0: layers ``i >= first_k_dense_replace`` with ``i % moe_layer_freq == 0``
    use ``num_experts`` routed experts of ``moe_intermediate_size`` (``num_experts_per_tok``
    per token) plus always-on shared experts of ``shared_intermediate_size`` in all (Qwen2-MoE
    names it; DeepSeek: ``num_shared_experts`` x ``moe_intermediate_size``); the other layers
    use a dense MLP of ``intermediate_size``. ``moe_layer_indices``, when set, lists the MoE
    layers instead (Qwen2/3-MoE's ``decoder_sparse_step`` and ``mlp_only_layers``).

    Attention: ``sliding_window`` is a window every layer uses (Mistral); ``layer_windows``
    gives one window per layer (None: full attention) when layers differ (Gemma-2/3), and
    then ``sliding_window`` is None. ``kv_bytes_per_token`` counts every layer;
    ``sim.model.attention.kv_bytes_per_seq`` caps each layer at its window.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    max_position_embeddings: int | None = None
    max_context_tokens: int | None = None  # the context vLLM derives (hf_config.derived_context_len)
    mlp: MlpKind = MlpKind.GATED
    norm: NormKind = NormKind.RMS
    qkv_bias: bool = False  # Qwen2, OPT
    linear_bias: bool = False  # bias on o_proj and MLP too (OPT)
    num_learned_positions: int = 0  # learned position embedding rows (OPT: max_pos + 2)
    word_embed_proj_dim: int | None = None  # OPT: embeddings narrower than hidden_size
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    moe_layer_indices: tuple[int, ...] | None = None
    # Qwen2-MoE's one shared expert; its num_shared_experts is that width in expert units
    # (rounded up), which is what the memory plan's activation estimate reads.
    shared_expert_intermediate_size: int | None = None
    shared_expert_gate: bool = False  # Qwen2-MoE: a sigmoid gate (hidden -> 1) on the shared expert
    router_bias: bool = False  # DeepSeek-V3: e_score_correction_bias, one per routed expert
    norms_per_layer: int = 2  # Gemma-2/3: 4 (norms before and after attention and MLP)
    qk_norm: bool = False  # Qwen3, Gemma-3: an RMSNorm (head_dim weights) on q and on k
    layer_windows: tuple[int | None, ...] | None = None

    def __post_init__(self) -> None:
        check_shapes(self)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_moe_layers(self) -> int:
        return sum(moe_layer_flags(self.num_layers, num_experts=self.num_experts,
                                   first_k_dense_replace=self.first_k_dense_replace,
                                   moe_layer_freq=self.moe_layer_freq,
                                   moe_layer_indices=self.moe_layer_indices))

    @property
    def shared_intermediate_size(self) -> int:
        """Width of the always-on shared experts of a MoE layer, all together (0: none)."""
        if not self.is_moe:
            return 0
        if self.shared_expert_intermediate_size is not None:
            return self.shared_expert_intermediate_size
        return self.num_shared_experts * self.moe_intermediate_size

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def embed_dim(self) -> int:
        return self.word_embed_proj_dim or self.hidden_size

    @property
    def num_params(self) -> int:
        """All parameters, every expert included (what the weights occupy)."""
        matmul = sum(op.k * op.n * op.num_experts * op.num_layers for op in linear_ops(self))
        embed = self.vocab_size * self.embed_dim + self.num_learned_positions * self.hidden_size
        if self.embed_dim != self.hidden_size:  # OPT project_in / project_out
            embed += 2 * self.embed_dim * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * self.embed_dim
        return matmul + embed + lm_head + self._num_bias_and_norm_params()

    @property
    def num_active_params(self) -> int:
        """Parameters a token's forward pass uses: all but the routed experts it skips."""
        skipped = 0
        for op in linear_ops(self):
            if op.num_experts > 1:
                skipped += op.k * op.n * (op.num_experts - op.experts_per_tok) * op.num_layers
        return self.num_params - skipped

    def _num_bias_and_norm_params(self) -> int:
        per_norm = self.hidden_size * (2 if self.norm is NormKind.LAYER else 1)
        total = (self.norms_per_layer * self.num_layers + 1) * per_norm  # per layer + the final norm
        if self.qk_norm:
            total += self.num_layers * 2 * self.head_dim
        total += self.num_moe_layers * (self.hidden_size * self.shared_expert_gate
                                        + self.num_experts * self.router_bias)
        if self.is_mla:  # RMSNorms inside the MLA projections
            total += self.num_layers * (self.kv_lora_rank + (self.q_lora_rank or 0))
        if self.qkv_bias:
            total += self.num_layers * (self.num_attention_heads + 2 * self.num_kv_heads) * self.head_dim
        if self.linear_bias:
            total += self.num_layers * self.hidden_size  # o_proj
            mlp_out = self.intermediate_size * (2 if self.mlp is MlpKind.GATED else 1)
            total += self.num_dense_mlp_layers * (mlp_out + self.hidden_size)
        return total


#: linear_ops' attention projections (listed first), as opposed to the MLP's and the experts'
ATTENTION_OPS = frozenset({"qkv", "o", "q", "q_a", "q_b", "kv_a", "kv_b"})


def linear_ops(model: ModelSpec) -> tuple[LinearOp, ...]:
    """The per-layer GEMMs of ``model``: attention projections (ATTENTION_OPS) then the MLP; no lm_head."""
    L, h, H = model.num_layers, model.hidden_size, model.num_attention_heads
    if model.is_mla:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        if model.q_lora_rank:
            attn = [LinearOp("q_a", h, model.q_lora_rank, L),
                    LinearOp("q_b", model.q_lora_rank, H * qk, L)]
        else:
            attn = [LinearOp("q", h, H * qk, L)]
        attn += [LinearOp("kv_a", h, model.kv_lora_rank + model.qk_rope_head_dim, L),
                 LinearOp("kv_b", model.kv_lora_rank, H * (model.qk_nope_head_dim + model.v_head_dim), L),
                 LinearOp("o", H * model.v_head_dim, h, L)]
    else:
        d = model.head_dim
        attn = [LinearOp("qkv", h, (H + 2 * model.num_kv_heads) * d, L), LinearOp("o", H * d, h, L)]
    dense, inter = model.num_dense_mlp_layers, model.intermediate_size
    if model.mlp is MlpKind.GATED:
        mlp = [LinearOp("gate_up", h, 2 * inter, dense), LinearOp("down", inter, h, dense)]
    else:
        mlp = [LinearOp("fc1", h, inter, dense), LinearOp("fc2", inter, h, dense)]
    mlp = [op for op in mlp if op.num_layers > 0]
    if model.is_moe:
        moe_L, E, k, mi = model.num_moe_layers, model.num_experts, model.num_experts_per_tok, model.moe_intermediate_size
        mlp += [LinearOp("router", h, E, moe_L),
                LinearOp("experts_gate_up", h, 2 * mi, moe_L, E, k),
                LinearOp("experts_down", mi, h, moe_L, E, k)]
        si = model.shared_intermediate_size
        if si:
            mlp += [LinearOp("shared_gate_up", h, 2 * si, moe_L), LinearOp("shared_down", si, h, moe_L)]
    return tuple(attn + mlp)


def lm_head_op(model: ModelSpec) -> LinearOp:
    """The vocabulary projection; run only for rows that need logits."""
    return LinearOp("lm_head", model.embed_dim, model.vocab_size, 1)


def attn_flops_per_pair(model: ModelSpec) -> int:
    """FLOPs of one (query, key) pair summed over layers and heads: QK^T dot plus PV.

    Standard: 2 x 2 x heads x head_dim per layer. MLA (non-absorbed, as in prefill):
    2 x heads x (qk_nope + qk_rope) + 2 x heads x v_head_dim per layer.
    """
    H = model.num_attention_heads
    if model.is_mla:
        per_layer = 2 * H * (model.qk_nope_head_dim + model.qk_rope_head_dim) + 2 * H * model.v_head_dim
    else:
        per_layer = 4 * H * model.head_dim
    return model.num_layers * per_layer


def decode_attn_flops_per_pair(model: ModelSpec) -> int:
    """FLOPs of one decode (query, key) pair summed over layers and heads: as ``attn_flops_per_pair``
    but MLA in the absorbed form every engine decodes with (the latent is the key and the value):
    2 x heads x (kv_lora_rank + qk_rope) + 2 x heads x kv_lora_rank per layer, compute-bound."""
    if not model.is_mla:
        return attn_flops_per_pair(model)
    H, c = model.num_attention_heads, model.kv_lora_rank
    return model.num_layers * (2 * H * (c + model.qk_rope_head_dim) + 2 * H * c)


def flops_per_token(model: ModelSpec) -> int:
    """Matmul FLOPs per token excluding attention scores: 2 x active matmul params + lm_head."""
    total = sum(2 * op.k * op.n * op.experts_per_tok * op.num_layers for op in linear_ops(model))
    head = lm_head_op(model)
    return total + 2 * head.k * head.n


def elementwise_bytes_per_token(model: ModelSpec, act_bytes: float, kv_bytes: float) -> float:
    """Bytes of non-GEMM memory traffic per token of a step, all layers.

    Per layer: two RMS/LayerNorms (read + write hidden: 4h), two residual adds (6h), RoPE
    on q and k (read + write), the MLP activation (read gate and up, write: 3 x
    intermediate; MoE: for top-k routed plus shared experts). Norms beyond two per layer
    (Gemma-2/3) add 4h each. Plus the embedding row and the KV cache write (``kv_bytes``,
    already in the KV dtype).
    """
    h = model.hidden_size
    if model.is_mla:
        rope = 2 * (model.num_attention_heads + 1) * model.qk_rope_head_dim
    else:
        rope = 2 * (model.num_attention_heads + model.num_kv_heads) * model.head_dim
    act = 3 if model.mlp is MlpKind.GATED else 2
    dense = model.num_dense_mlp_layers * act * model.intermediate_size
    moe = 0
    if model.is_moe:
        moe = model.num_moe_layers * 3 * (model.moe_intermediate_size * model.num_experts_per_tok
                                          + model.shared_intermediate_size)
    extra_norms = 4 * h * (model.norms_per_layer - 2)
    elements = model.num_layers * (10 * h + rope + extra_norms) + dense + moe + h
    return elements * act_bytes + kv_bytes


#: Kernels per MoE layer for the routing: top-k over the router logits, the token permute
#: (each token's hidden vector to its experts' rows) and the unpermute (weighted top-k sum).
MOE_ROUTING_KERNELS_PER_LAYER = 3


def moe_routing_bytes_per_token(model: ModelSpec, act_bytes: float) -> float:
    """Bytes per token of the MoE layers' routing, all MoE layers (0 for dense models).

    Per MoE layer: the top-k reads the token's router logits (num_experts) and writes top_k
    ids and weights (4 bytes each); the permute reads and writes the hidden vector once per
    chosen expert and the unpermute reads and writes them back: 2 x 2 x top_k x hidden."""
    if not model.is_moe:
        return 0
    k = model.num_experts_per_tok
    per_layer = (4 * k * model.hidden_size + model.num_experts) * act_bytes + 8 * k
    return model.num_moe_layers * per_layer


def _integral(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def kv_bytes_per_token(model: ModelSpec, kv_dtype: KVDtype | str, *,
                       quant_group_size: int = 64, scale_bytes: int = 2) -> int | float:
    """KV cache bytes one token occupies across all layers (an int when integral).

    Elements: 2 x num_layers x num_kv_heads x head_dim (K and V), or for MLA
    num_layers x (kv_lora_rank + qk_rope_head_dim) (one latent, no separate V).
    int8/int4 add one ``scale_bytes`` scale per ``quant_group_size`` elements of each
    cached vector (a head's K or V, or an MLA latent), groups not spanning vectors:
    ceil(vector_len / quant_group_size) scales per vector. fp8 uses per-tensor scales
    (vLLM's ``kv_cache_dtype=fp8``), so no per-token overhead and ``quant_group_size`` is
    ignored; fp16/bf16 have no scales.
    """
    dtype = KVDtype(kv_dtype)
    if quant_group_size <= 0:
        raise ValueError(f"quant_group_size must be positive, got {quant_group_size}")
    if model.is_mla:
        num_vectors, vector_len = model.num_layers, model.kv_lora_rank + model.qk_rope_head_dim
    else:
        num_vectors, vector_len = 2 * model.num_layers * model.num_kv_heads, model.head_dim
    total = num_vectors * vector_len * dtype.bytes_per_element
    if dtype.has_group_scales:
        total += num_vectors * math.ceil(vector_len / quant_group_size) * scale_bytes
    return _integral(total)


def max_kv_tokens_per_seq(model: ModelSpec, max_model_len: int) -> int:
    """The most KV tokens one sequence ever holds: min(max_model_len, sliding_window).

    Sliding-window models keep bytes per token unchanged but drop tokens older than the
    window, so a sequence never needs more than ``sliding_window`` tokens of cache. With
    per-layer windows (``layer_windows``) the full-attention layers keep every token, so
    this is ``max_model_len``: the simulator's allocator gives each token one slot of every
    layer (vLLM without its hybrid KV cache manager); ``sim.model.attention`` has the exact
    per-layer bytes.
    """
    if model.sliding_window is None:
        return max_model_len
    return min(max_model_len, model.sliding_window)


__all__ = [
    "ATTENTION_OPS", "KVDtype", "MlpKind", "NormKind", "ModelSpec", "LinearOp", "linear_ops", "lm_head_op",
    "attn_flops_per_pair", "decode_attn_flops_per_pair", "elementwise_bytes_per_token", "flops_per_token", "kv_bytes_per_token",
    "max_kv_tokens_per_seq", "moe_routing_bytes_per_token", "MOE_ROUTING_KERNELS_PER_LAYER",
]

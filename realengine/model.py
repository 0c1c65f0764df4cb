"""A small Llama-architecture model in torch, random weights, for ``sim validate``.

Shapes come from the scenario's ``ModelSpec`` (no downloads): token embeddings,
``num_layers`` x (RMSNorm, fused QKV projection, RoPE, GQA attention over the paged KV
cache, output projection, RMSNorm, gated SiLU MLP), a final RMSNorm and the lm_head.
Attention and KV writes go through a *backend*: the Triton kernels on CUDA, the torch
reference paths on the CPU (same interfaces, ``kernels/reference.py``).

One forward runs a whole engine step: a packed batch of prefill chunks (each over its
cached prefix) followed by decode tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim.engine.parts import build_plan
from sim.model.spec import ModelSpec

#: The element types the real engine and the microbenchmarks run in torch, keyed by their
#: names in sim.model.dtypes.DTYPE_BYTES.
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class CpuBackend:
    """The torch reference paths (what ``microbench calibrate --device cpu`` times)."""

    def __init__(self) -> None:
        from kernels.reference import paged_attention_decode_ref, prefill_attention_ref

        self.decode = paged_attention_decode_ref
        self.prefill = prefill_attention_ref

    @staticmethod
    def write_kv(key, value, key_cache, value_cache, slot_mapping) -> None:
        h, d = key_cache.shape[2:]
        key_cache.view(-1, h, d).index_copy_(0, slot_mapping, key)
        value_cache.view(-1, h, d).index_copy_(0, slot_mapping, value)


class TritonBackend:
    """The Triton kernels of ``kernels/``."""

    def __init__(self) -> None:
        from kernels import paged_attention_decode, prefill_attention, write_kv_cache

        self.decode = paged_attention_decode
        self.prefill = prefill_attention
        self.write_kv = write_kv_cache


def make_backend(device: torch.device, kind: str | None = None):
    """``kind``: "triton", "reference" or None (Triton on CUDA, the references on the CPU;
    Triton on CPU tensors needs TRITON_INTERPRET=1, as the tests run it)."""
    if kind is None:
        kind = "triton" if device.type == "cuda" else "reference"
    if kind not in ("triton", "reference"):
        raise ValueError(f"backend: got {kind!r}; allowed: triton, reference")
    return TritonBackend() if kind == "triton" else CpuBackend()


@dataclass
class StepInputs:
    """One step's packed batch. Prefill tokens come first, then one token per decode.

    token_ids, positions, slot_mapping: [num_tokens]; the prefill part is
    ``num_prefill_tokens`` long, described per chunk by ``prefill_block_tables``
    [P, max_blocks], ``query_start_loc`` [P + 1] and ``context_lens`` [P] (cached tokens
    before the chunk); decodes by ``decode_block_tables`` [D, max_blocks] and
    ``seq_lens`` [D] (tokens in the cache once this token's KV is written).
    ``sample_index`` [S]: rows whose hidden state feeds the lm_head (last token of each
    sequence that samples this step).
    """

    token_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    num_prefill_tokens: int
    prefill_block_tables: torch.Tensor
    query_start_loc: torch.Tensor
    context_lens: torch.Tensor
    max_query_len: int
    decode_block_tables: torch.Tensor
    seq_lens: torch.Tensor
    max_seq_len: int
    sample_index: torch.Tensor


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float = 10000.0):
    """cos, sin [T, 1, head_dim / 2] of the rotary embedding, computed once per step
    and shared by every layer (as vLLM's cos_sin_cache is)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                            dtype=torch.float32) / head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    return angles.cos()[:, None, :], angles.sin()[:, None, :]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (rotate-half form). x [T, H, D]; cos, sin from rope_cos_sin."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """The gated MLP's activation: silu(gate) * up, gate_up [T, 2 I] -> [T, I]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


class TinyLlama:
    """Random-weight Llama. ``key_caches[l]`` / ``value_caches[l]``:
    [num_blocks, block_size, num_kv_heads, head_dim] per layer."""

    def __init__(self, spec: ModelSpec, *, num_blocks: int, block_size: int,
                 device: torch.device, dtype: torch.dtype, seed: int = 0, backend: str | None = None) -> None:
        if spec.is_mla or spec.num_experts:
            raise ValueError(f"the validation model is dense Llama-style; {spec.name} is not")
        self.spec, self.device, self.dtype = spec, device, dtype
        self.backend = make_backend(device, backend)
        gen = torch.Generator(device=device).manual_seed(seed)  # drawn where they live: 8B weights are fast on a GPU
        h, hq, hkv, d = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
        self.num_q_heads, self.num_kv_heads, self.head_dim = hq, hkv, d

        def w(*shape, scale=None):
            t = torch.randn(*shape, generator=gen, device=device) * (scale or shape[-1] ** -0.5)
            return t.to(dtype=dtype)

        self.embed = w(spec.vocab_size, h, scale=1.0)
        self.layers = [dict(
            attn_norm=torch.ones(h, device=device, dtype=dtype),
            qkv=w((hq + 2 * hkv) * d, h), o=w(h, hq * d),
            mlp_norm=torch.ones(h, device=device, dtype=dtype),
            gate_up=w(2 * spec.intermediate_size, h), down=w(h, spec.intermediate_size),
        ) for _ in range(spec.num_layers)]
        self.final_norm = torch.ones(h, device=device, dtype=dtype)
        self.lm_head = self.embed if spec.tie_word_embeddings else w(spec.vocab_size, h)
        cache_shape = (num_blocks, block_size, hkv, d)
        self.key_caches = [torch.zeros(cache_shape, device=device, dtype=dtype) for _ in self.layers]
        self.value_caches = [torch.zeros(cache_shape, device=device, dtype=dtype) for _ in self.layers]

    def attention(self, layer: int, q, k, v, inp: StepInputs) -> torch.Tensor:
        """Write this step's K/V into the paged cache, then attend. q [T, Hq, D] -> same."""
        kc, vc, be = self.key_caches[layer], self.value_caches[layer], self.backend
        be.write_kv(k, v, kc, vc, inp.slot_mapping)
        p = inp.num_prefill_tokens
        parts = []
        if p:
            kwargs = {"max_query_len": inp.max_query_len} if isinstance(be, TritonBackend) else {}
            parts.append(be.prefill(q[:p], k[:p], v[:p], kc, vc, inp.prefill_block_tables,
                                    inp.query_start_loc, inp.context_lens, **kwargs))
        if q.shape[0] > p:
            kwargs = {"max_seq_len": inp.max_seq_len} if isinstance(be, TritonBackend) else {}
            parts.append(be.decode(q[p:], kc, vc, inp.decode_block_tables, inp.seq_lens, **kwargs))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    @torch.inference_mode()
    def forward(self, inp: StepInputs, keep_attention: bool = False):
        """Greedy next tokens for ``inp.sample_index`` rows: [S] int64. With
        ``keep_attention`` also returns every layer's attention output (for tests)."""
        hq, hkv, d = self.num_q_heads, self.num_kv_heads, self.head_dim
        x = self.embed[inp.token_ids]
        cos, sin = rope_cos_sin(inp.positions, d)
        kept = []
        for i, lw in enumerate(self.layers):
            qkv = _rms_norm(x, lw["attn_norm"]) @ lw["qkv"].t()
            q, k, v = qkv.split((hq * d, hkv * d, hkv * d), dim=-1)
            q = apply_rope(q.reshape(-1, hq, d), cos, sin)
            k = apply_rope(k.reshape(-1, hkv, d), cos, sin)
            attn = self.attention(i, q, k, v.reshape(-1, hkv, d).contiguous(), inp)
            if keep_attention:
                kept.append(attn.clone())
            x = x + attn.reshape(-1, hq * d) @ lw["o"].t()
            x = x + silu_mul(_rms_norm(x, lw["mlp_norm"]) @ lw["gate_up"].t()) @ lw["down"].t()
        hidden = _rms_norm(x[inp.sample_index], self.final_norm)
        tokens = torch.argmax(hidden @ self.lm_head.t(), dim=-1)
        return (tokens, kept) if keep_attention else tokens

    @torch.inference_mode()
    def dense_attention(self, token_ids: list[int]) -> list[torch.Tensor]:
        """Reference: every layer's attention output [T, Hq, D] for one whole sequence,
        computed densely (no cache, plain causal softmax attention). Tests compare the
        paged engine's outputs at the new positions against it."""
        hq, hkv, d = self.num_q_heads, self.num_kv_heads, self.head_dim
        ids = torch.tensor(token_ids, device=self.device)
        cos, sin = rope_cos_sin(torch.arange(len(token_ids), device=self.device), d)
        x, outs = self.embed[ids], []
        mask = torch.ones(len(ids), len(ids), dtype=torch.bool, device=self.device).tril()
        for lw in self.layers:
            q, k, v = (_rms_norm(x, lw["attn_norm"]) @ lw["qkv"].t()).split((hq * d, hkv * d, hkv * d), -1)
            q, k = apply_rope(q.reshape(-1, hq, d), cos, sin), apply_rope(k.reshape(-1, hkv, d), cos, sin)
            k = k.float().repeat_interleave(hq // hkv, dim=1)
            v = v.reshape(-1, hkv, d).float().repeat_interleave(hq // hkv, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q.float(), k) / d**0.5
            attn = torch.einsum("hqk,khd->qhd", scores.masked_fill(~mask, float("-inf")).softmax(-1), v)
            attn = attn.to(x.dtype)
            outs.append(attn)
            x = x + attn.reshape(-1, hq * d) @ lw["o"].t()
            x = x + silu_mul(_rms_norm(x, lw["mlp_norm"]) @ lw["gate_up"].t()) @ lw["down"].t()
        return outs


def make_model(sc, device: torch.device) -> TinyLlama:
    """The scenario's model with random weights and a KV cache of the plan's blocks."""
    if sc.engine.weight_dtype not in ("fp16", "bf16"):
        raise ValueError(f"the real engine runs fp16 or bf16 weights, not {sc.engine.weight_dtype}")
    model, _, plan = build_plan(sc)  # the model and KV pool only: no workload, no scheduler
    return TinyLlama(model, num_blocks=plan.num_gpu_blocks, block_size=sc.kv.block_size,
                     device=device, dtype=TORCH_DTYPES[sc.engine.weight_dtype], seed=sc.seed)

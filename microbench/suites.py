"""What ``microbench calibrate`` measures: (kernel, shape) cases from the chosen models.

GEMMs run on each model's weight shapes (QKV, O, gate/up, down, lm_head; from
sim.model.linear_ops) over token counts; attention on the models' head layouts over
batch sizes, context and prompt lengths; plus KV writes, RMSNorm, a layer's other
elementwise work (RoPE, activation, residual adds: dense models), copies (device,
host<->device pinned and pageable, 4 KiB to 1 GiB: a KV block per layer is a few KiB), the per-step work, and whole
engine steps of each dense model cut to a few layers (sim.calib.composition: how the kernels
compose). The grids are
smaller on the CPU (the torch reference paths are slow) and with ``--quick``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.model.spec import ModelSpec, linear_ops, lm_head_op


@dataclass(frozen=True)
class SuiteGrid:
    gemm_m: tuple[int, ...]
    gemv_m: tuple[int, ...]
    lm_head: bool
    decode: tuple[tuple[int, int], ...]  # (num_seqs, context_len)
    prefill: tuple[tuple[int, int, int], ...]  # (num_seqs, query_len, context_len)
    tokens: tuple[int, ...]  # kv_write and rmsnorm
    copy_bytes: tuple[int, ...]
    host_copy_bytes: tuple[int, ...]
    step_seqs: tuple[int, ...]
    # whole engine steps (sim.calib.composition): (decode_seqs, decode_context, prefill_seqs,
    # prefill_query, prefill_context), each at every layer count
    forward: tuple[tuple[int, int, int, int, int], ...] = ()
    forward_layers: tuple[int, ...] = ()


KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
_CUDA_DECODE = tuple((b, c) for b in (1, 4, 16, 64, 256) for c in (128, 512, 2048, 8192, 32768) if b * c <= 1 << 19)
GRIDS = {
    ("cuda", False): SuiteGrid(
        gemm_m=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048,
                3072, 4096, 6144, 8192),
        gemv_m=(1, 2, 4, 8, 16, 32, 64), lm_head=True, decode=_CUDA_DECODE,
        prefill=tuple((n, q, c) for n in (1, 4) for q in (16, 64, 256, 1024, 4096) for c in (0, 1024, 4096)
                      if n * (q + c) <= 16384),
        tokens=(1, 16, 128, 1024, 8192, 32768),
        copy_bytes=(4 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB),
        host_copy_bytes=(4 * KiB, 64 * KiB, 256 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, GiB),
        step_seqs=(1, 8, 64, 256),
        forward=((1, 512, 0, 0, 0), (8, 1024, 0, 0, 0), (32, 2048, 0, 0, 0), (64, 512, 0, 0, 0),
                 (128, 1024, 0, 0, 0), (256, 2048, 0, 0, 0), (0, 0, 1, 128, 0), (0, 0, 1, 512, 0),
                 (0, 0, 1, 2048, 0), (0, 0, 1, 512, 2048), (0, 0, 4, 512, 0), (32, 1024, 1, 512, 0),
                 (128, 512, 1, 256, 1024)),
        forward_layers=(1, 4)),
    ("cuda", True): SuiteGrid(
        gemm_m=(1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192), gemv_m=(1, 8, 32), lm_head=True,
        decode=((1, 512), (1, 8192), (16, 2048), (64, 4096), (256, 1024)),
        prefill=((1, 64, 0), (1, 512, 0), (1, 2048, 0), (1, 512, 2048), (4, 1024, 0)),
        tokens=(1, 128, 4096), copy_bytes=(4 * KiB, MiB, 16 * MiB, 256 * MiB),
        host_copy_bytes=(4 * KiB, MiB, 16 * MiB, 256 * MiB), step_seqs=(1, 64, 256),
        forward=((1, 512, 0, 0, 0), (32, 1024, 0, 0, 0), (128, 512, 0, 0, 0), (0, 0, 1, 512, 0),
                 (0, 0, 1, 2048, 0), (32, 1024, 1, 512, 0)),
        forward_layers=(1, 2)),
    ("cpu", False): SuiteGrid(
        gemm_m=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), gemv_m=(), lm_head=True,
        decode=tuple((b, c) for b in (1, 4, 16, 64) for c in (64, 256, 1024, 4096) if b * c <= 1 << 16),
        prefill=tuple((n, q, c) for n in (1, 4) for q in (16, 64, 256, 512) for c in (0, 512) if n * (q + c) <= 2048),
        tokens=(1, 16, 128, 1024, 4096), copy_bytes=(4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB, 256 * MiB),
        host_copy_bytes=(4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB, 256 * MiB), step_seqs=(1, 8, 64),
        forward=((1, 64, 0, 0, 0), (1, 512, 0, 0, 0), (2, 128, 0, 0, 0), (4, 256, 0, 0, 0), (8, 64, 0, 0, 0),
                 (16, 128, 0, 0, 0), (16, 512, 0, 0, 0), (0, 0, 1, 16, 0), (0, 0, 1, 128, 0), (0, 0, 1, 512, 0),
                 (0, 0, 1, 128, 384), (0, 0, 2, 64, 0), (4, 128, 1, 64, 0), (8, 256, 1, 32, 256)),
        forward_layers=(2, 4)),
    ("cpu", True): SuiteGrid(
        gemm_m=(1, 4, 16, 64, 256), gemv_m=(), lm_head=False,
        decode=((1, 256), (1, 2048), (4, 1024), (16, 256), (16, 1024)),
        prefill=((1, 32, 0), (1, 128, 0), (1, 256, 256), (2, 64, 128), (1, 512, 0)),
        tokens=(1, 16, 256, 1024, 4096), copy_bytes=(4 * KiB, 64 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB),
        host_copy_bytes=(4 * KiB, 64 * KiB, MiB, 4 * MiB, 16 * MiB, 64 * MiB), step_seqs=(1, 4, 16, 64),
        forward=((1, 64, 0, 0, 0), (1, 256, 0, 0, 0), (2, 128, 0, 0, 0), (8, 128, 0, 0, 0), (16, 512, 0, 0, 0),
                 (0, 0, 1, 32, 0), (0, 0, 1, 128, 0), (0, 0, 1, 256, 256), (4, 128, 1, 64, 0)),
        forward_layers=(2, 4)),
}
#: One layer's K or V block the swap cases copy: vLLM's 16-token block of Llama-3-8B's 8 KV heads of
#: 128 in bf16 (and the validation scenario's 64-token blocks of its small Llama).
SWAP_BLOCK_BYTES = 32 * KiB
IDLE_PROBE_S = 0.05  # whole steps are also timed after this much idleness
DEFAULT_MODELS = {"cuda": ("llama-3-8b",), "cpu": ("qwen2.5-1.5b",)}


def forward_cases(model: ModelSpec, g: SuiteGrid, dtype: str) -> list[tuple[str, dict]]:
    """Whole engine steps of ``model`` truncated to each of ``g.forward_layers`` layers, the
    biggest batch first (the case builds its KV pool once for a model's run of batches)."""
    shape = dict(hidden_size=model.hidden_size, num_q_heads=model.num_attention_heads,
                 num_kv_heads=model.num_kv_heads, head_dim=model.head_dim,
                 intermediate_size=model.intermediate_size, vocab_size=model.vocab_size,
                 tie_word_embeddings=model.tie_word_embeddings)
    batches = sorted(g.forward, key=lambda b: -(b[0] * (b[1] + 1) + b[2] * (b[3] + b[4])))
    out = [("forward", dict(shape, num_layers=min(layers, model.num_layers), decode_seqs=nd, decode_context=cd,
                            prefill_seqs=npf, prefill_query=q, prefill_context=cp, dtype=dtype))
           for layers in g.forward_layers for nd, cd, npf, q, cp in batches]
    # the same batches at the most layers, each after IDLE_PROBE_S of sleep (sim.calib.composition)
    deepest = [(k, s) for k, s in out if s["num_layers"] == min(max(g.forward_layers), model.num_layers)]
    return out + [(k, dict(s, idle_s=IDLE_PROBE_S)) for k, s in deepest]


def cases(models: list[ModelSpec], device_type: str, quick: bool, dtype: str = "bf16") -> list[tuple[str, dict]]:
    """The (kernel, shape) list of one sweep, deduplicated, in a stable order."""
    g = GRIDS[(device_type, quick)]
    out: list[tuple[str, dict]] = []
    for model in models:
        ops = [(op.k, op.n) for op in linear_ops(model) if op.num_experts == 1]
        if g.lm_head:
            head = lm_head_op(model)
            ops.append((head.k, head.n))
        out += [("gemm", dict(m=m, n=n, k=k, dtype=dtype)) for k, n in ops for m in g.gemm_m]
        out += [("decode_gemv", dict(m=m, n=n, k=k, dtype=dtype)) for k, n in ops[:4] for m in g.gemv_m]
        heads = dict(num_q_heads=model.num_attention_heads, num_kv_heads=model.num_kv_heads, head_dim=model.head_dim)
        out += [("decode_attention", dict(num_seqs=b, context_len=c, **heads, block_size=16, dtype=dtype))
                for b, c in g.decode]
        out += [("prefill_attention", dict(num_seqs=n, query_len=q, context_len=c, **heads, dtype=dtype))
                for n, q, c in g.prefill]
        out += [("kv_write", dict(num_tokens=t, num_kv_heads=model.num_kv_heads, head_dim=model.head_dim,
                                  dtype=dtype)) for t in g.tokens]
        out += [("rmsnorm", dict(num_tokens=t, hidden_size=model.hidden_size, dtype=dtype)) for t in g.tokens]
        if not model.is_mla and not model.is_moe:  # the validation engine's dense Llama layer
            out += [("elementwise", dict(num_tokens=t, **heads, intermediate_size=model.intermediate_size,
                                         hidden_size=model.hidden_size, dtype=dtype)) for t in g.tokens]
        out += [("step", dict(num_seqs=n, vocab_size=model.vocab_size)) for n in g.step_seqs]
        if not model.is_mla and not model.is_moe:
            out += forward_cases(model, g, dtype)
    out += [("copy_d2d", dict(num_bytes=b)) for b in g.copy_bytes]
    pinned = (True, False) if device_type == "cuda" else (False,)
    for kernel in ("copy_h2d", "copy_d2h"):
        out += [(kernel, dict(num_bytes=b, pinned=p)) for p in pinned for b in g.host_copy_bytes]
    for kernel in ("swap_in", "swap_out"):  # the CPU tier's block copies (realengine.tier_copy)
        out += [(kernel, dict(num_bytes=b, block_bytes=SWAP_BLOCK_BYTES, pinned=p))
                for p in pinned for b in g.host_copy_bytes if b >= 2 * SWAP_BLOCK_BYTES]
    seen, unique = set(), []
    for kernel, shape in out:
        key = (kernel, tuple(sorted(shape.items())))
        if key not in seen:
            seen.add(key)
            unique.append((kernel, shape))
    return unique

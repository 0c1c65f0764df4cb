"""Inputs and callables for one measurement: ``make_fns(kernel, shape, device, copies)``.

On CUDA the callables run kvsim's Triton kernels (``kernels/``) and torch's cuBLAS GEMM;
on the CPU they run the torch reference paths (``kernels.reference``; the KV write as one
vectorized index_copy, since the reference loops over tokens in Python). Each callable
does one launch's work on its own copy of the inputs (``copies`` of them, for rotation).
Inputs are random; timings do not depend on values. The peak suite's GEMMs and weight-only
GEMVs are built by microbench.peaks.
"""

from __future__ import annotations

import math

from microbench.peaks import PEAK_KERNELS, make_peak_fn
from sim.model.dtypes import DTYPE_BYTES


def input_bytes(kernel: str, shape: dict) -> int:
    """Bytes of one copy of the inputs a launch reads (sizes the rotation)."""
    b = DTYPE_BYTES.get(shape.get("dtype", "bf16"), 2)
    if kernel in ("gemm", "decode_gemv", "gemm_peak", "weight_only_gemv"):
        return (shape["m"] + shape["n"]) * shape["k"] * b
    if kernel == "decode_attention":
        return shape["num_seqs"] * shape["context_len"] * 2 * shape["num_kv_heads"] * shape["head_dim"] * b
    if kernel == "prefill_attention":
        tokens = shape["num_seqs"] * (shape["context_len"] + shape["query_len"])
        return tokens * 2 * shape["num_kv_heads"] * shape["head_dim"] * b
    if kernel == "kv_write":
        return 2 * shape["num_tokens"] * shape["num_kv_heads"] * shape["head_dim"] * b
    if kernel == "rmsnorm":
        return 2 * shape["num_tokens"] * shape["hidden_size"] * b
    if kernel == "step":
        return 4 * shape["num_seqs"] * shape["vocab_size"]
    if kernel == "forward":
        return 0  # a whole step on one model: its weights are the rotation
    if kernel == "elementwise":
        per_token = ((shape["num_q_heads"] + shape["num_kv_heads"]) * shape["head_dim"]
                     + 2 * shape["intermediate_size"] + 3 * shape["hidden_size"])
        return shape["num_tokens"] * per_token * b
    return int(shape["num_bytes"])


def _paged(torch, device, dtype, lens: list[int], block_size: int, hkv: int, d: int, gen, cpu_gen):
    """A paged K and V cache holding ``lens`` tokens per sequence in shuffled blocks, and its block table."""
    per_seq = [max(1, math.ceil(n / block_size)) for n in lens]
    num_blocks = sum(per_seq)
    k = torch.randn(num_blocks, block_size, hkv, d, device=device, dtype=dtype, generator=gen)
    v = torch.randn(num_blocks, block_size, hkv, d, device=device, dtype=dtype, generator=gen)
    perm = torch.randperm(num_blocks, generator=cpu_gen).to(torch.int32)
    table = torch.zeros(len(lens), max(per_seq), dtype=torch.int32)
    pos = 0
    for s, nb in enumerate(per_seq):
        table[s, :nb] = perm[pos:pos + nb]
        pos += nb
    return k, v, table.to(device)


def _one(torch, kernel: str, s: dict, device, gen, cpu_gen):
    """One callable for one copy of the inputs."""
    if kernel in PEAK_KERNELS:
        return make_peak_fn(torch, kernel, s, device, gen)
    from realengine.model import TORCH_DTYPES  # noqa: PLC0415  (imports torch)

    cuda = device.type == "cuda"
    dtype = TORCH_DTYPES.get(s.get("dtype", "bf16"), torch.bfloat16)
    rand = lambda *shape: torch.randn(*shape, device=device, dtype=dtype, generator=gen)  # noqa: E731
    if kernel in ("gemm", "decode_gemv"):
        x, w = rand(s["m"], s["k"]), rand(s["n"], s["k"])  # weight [n, k] as in nn.Linear
        if kernel == "decode_gemv":
            from kernels import decode_gemv  # noqa: PLC0415

            return lambda: decode_gemv(x, w)
        return lambda: torch.matmul(x, w.t())
    if kernel == "decode_attention":
        n, ctx, hq, hkv, d = s["num_seqs"], s["context_len"], s["num_q_heads"], s["num_kv_heads"], s["head_dim"]
        kc, vc, table = _paged(torch, device, dtype, [ctx] * n, s["block_size"], hkv, d, gen, cpu_gen)
        q, lens = rand(n, hq, d), torch.full((n,), ctx, dtype=torch.int32, device=device)
        if cuda:
            from kernels import paged_attention_decode  # noqa: PLC0415

            return lambda: paged_attention_decode(q, kc, vc, table, lens, max_seq_len=ctx)
        from kernels.reference import paged_attention_decode_ref  # noqa: PLC0415

        return lambda: paged_attention_decode_ref(q, kc, vc, table, lens)
    if kernel == "prefill_attention":
        n, ql, ctx, hq, hkv, d = (s["num_seqs"], s["query_len"], s["context_len"], s["num_q_heads"],
                                  s["num_kv_heads"], s["head_dim"])
        kc, vc, table = _paged(torch, device, dtype, [ctx + ql] * n, 16, hkv, d, gen, cpu_gen)
        q, k, v = rand(n * ql, hq, d), rand(n * ql, hkv, d), rand(n * ql, hkv, d)
        starts = torch.arange(0, n * ql + 1, ql, dtype=torch.int32, device=device)
        ctx_lens = torch.full((n,), ctx, dtype=torch.int32, device=device)
        if cuda:
            from kernels import prefill_attention  # noqa: PLC0415

            return lambda: prefill_attention(q, k, v, kc, vc, table, starts, ctx_lens, max_query_len=ql)
        from kernels.reference import prefill_attention_ref  # noqa: PLC0415

        return lambda: prefill_attention_ref(q, k, v, kc, vc, table, starts, ctx_lens)
    if kernel == "kv_write":
        t, hkv, d = s["num_tokens"], s["num_kv_heads"], s["head_dim"]
        kc, vc, _ = _paged(torch, device, dtype, [t], 16, hkv, d, gen, cpu_gen)
        k, v = rand(t, hkv, d), rand(t, hkv, d)
        slots = torch.randperm(kc.shape[0] * 16, generator=cpu_gen)[:t].to(device)
        if cuda:
            from kernels import write_kv_cache  # noqa: PLC0415

            return lambda: write_kv_cache(k, v, kc, vc, slots)
        flat_k, flat_v = kc.view(-1, hkv, d), vc.view(-1, hkv, d)
        return lambda: (flat_k.index_copy_(0, slots, k), flat_v.index_copy_(0, slots, v))
    if kernel == "rmsnorm":
        x, res, w = rand(s["num_tokens"], s["hidden_size"]), rand(s["num_tokens"], s["hidden_size"]), rand(s["hidden_size"])
        h = s["hidden_size"]
        return lambda: torch.nn.functional.rms_norm(res.add_(x), (h,), w, 1e-6)
    if kernel == "elementwise":
        from realengine.model import apply_rope, rope_cos_sin, silu_mul  # noqa: PLC0415

        t, hq, hkv, d = s["num_tokens"], s["num_q_heads"], s["num_kv_heads"], s["head_dim"]
        q, k = rand(t, hq, d), rand(t, hkv, d)
        gate_up, x, a, b = rand(t, 2 * s["intermediate_size"]), rand(t, s["hidden_size"]), \
            rand(t, s["hidden_size"]), rand(t, s["hidden_size"])
        cos, sin = rope_cos_sin(torch.arange(t, device=device), d)
        return lambda: (apply_rope(q, cos, sin), apply_rope(k, cos, sin), silu_mul(gate_up), x + a, x + b)
    if kernel == "copy_d2d":
        src = torch.empty(s["num_bytes"], dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    if kernel in ("copy_h2d", "copy_d2h"):
        host = torch.empty(s["num_bytes"], dtype=torch.uint8, pin_memory=bool(s["pinned"]) and cuda)
        dev = torch.empty(s["num_bytes"], dtype=torch.uint8, device=device)
        if kernel == "copy_h2d":
            return lambda: dev.copy_(host, non_blocking=bool(s["pinned"]))
        return lambda: host.copy_(dev, non_blocking=bool(s["pinned"]))
    if kernel in ("swap_in", "swap_out"):
        return _swap(torch, kernel, s, device, cuda)
    if kernel == "step":
        return _step(torch, s["num_seqs"], s["vocab_size"], device, gen)
    if kernel == "forward":
        return _forward(torch, s, device, dtype)
    raise ValueError(f"kernel: no case for {kernel!r}")


def make_fns(kernel: str, shape: dict, device, copies: int = 1) -> list:
    """``copies`` callables doing ``kernel`` on ``shape``, each on its own inputs (seeded)."""
    import torch  # noqa: PLC0415

    gen = torch.Generator(device=device).manual_seed(0)
    cpu_gen = torch.Generator().manual_seed(0)
    return [_one(torch, kernel, shape, device, gen, cpu_gen) for _ in range(max(1, copies))]


def _swap(torch, kernel: str, s: dict, device, cuda: bool):
    """The CPU tier's copies (realengine.tier_copy): ``num_bytes`` in blocks of ``block_bytes``
    between a host buffer and scattered blocks of a cache twice their number (a seeded
    shuffle: no run of consecutive blocks to copy as one slice); on CUDA through one
    contiguous device buffer and one (pinned or pageable) host copy, as the tier does."""
    import random  # noqa: PLC0415

    from realengine.tier_copy import block_rows, gather_rows, scatter_rows  # noqa: PLC0415

    n = max(1, s["num_bytes"] // s["block_bytes"])
    blocks = random.Random(n).sample(range(2 * n), n)
    cache = block_rows(torch.zeros((2 * n, s["block_bytes"]), dtype=torch.uint8, device=device))
    host = torch.ones((n, s["block_bytes"]), dtype=torch.uint8, pin_memory=bool(s["pinned"]) and cuda)
    idx = torch.tensor(blocks, dtype=torch.long, device=device)
    pinned = bool(s["pinned"])
    host = block_rows(host)
    if not cuda:
        if kernel == "swap_in":
            return lambda: scatter_rows(cache, blocks, host, idx)
        return lambda: gather_rows(cache, blocks, host, idx)
    staged = torch.empty_like(host, device=device)
    if kernel == "swap_in":
        return lambda: scatter_rows(cache, blocks, staged.copy_(host, non_blocking=pinned), idx)
    return lambda: (gather_rows(cache, blocks, staged, idx), host.copy_(staged, non_blocking=pinned))


def _step(torch, num_seqs: int, vocab_size: int, device, gen):
    """The engine's per-step host work (sim.validate.executor.pack_batch) for a decode
    batch of ``num_seqs`` sequences of 256 tokens, then greedy sampling of their logits and
    the sampled ids read back (a synchronization, as every engine step does)."""
    from sim.kv.paged import PagedAllocator  # noqa: PLC0415
    from sim.request import Request  # noqa: PLC0415
    from sim.sched.output import SchedulerOutput  # noqa: PLC0415
    from realengine.executor import pack_batch  # noqa: PLC0415

    alloc, out = PagedAllocator(num_seqs * 17, 16), SchedulerOutput()
    for i in range(num_seqs):
        req = Request(i, 0.0, ((i + 1, 255),), 8, 8)
        alloc.allocate_slots(req, 256)
        req.num_computed_tokens, req.num_generated = 255, 1
        out.add(req, 1)
    logits = torch.randn(num_seqs, vocab_size, device=device, dtype=torch.float32, generator=gen)

    def step():
        inp = pack_batch(out, alloc.block_tables, 16, vocab_size, device)
        return (torch.argmax(logits, dim=-1) + inp.positions[:1]).cpu()

    return step


_FORWARD_MODELS: dict = {}  # the model of the last forward case: a sweep times one model's batches in a row


def release_models() -> None:
    """Drop the cached forward-case model (its weights and KV cache)."""
    _FORWARD_MODELS.clear()


def _forward(torch, s: dict, device, dtype):
    """One whole step of the validation engine (sim.validate: pack the batch, the model's
    forward over the paged KV cache, the sampled ids read back) on a synthetic batch of
    ``decode_seqs`` decodes after ``decode_context`` tokens and ``prefill_seqs`` chunks of
    ``prefill_query`` tokens after ``prefill_context`` (fields: sim.calib.composition)."""
    from sim.calib.composition import forward_model  # noqa: PLC0415
    from sim.kv.paged import PagedAllocator  # noqa: PLC0415
    from sim.request import Request  # noqa: PLC0415
    from sim.sched.output import SchedulerOutput  # noqa: PLC0415
    from realengine.executor import StepExecutor  # noqa: PLC0415
    from realengine.model import TinyLlama  # noqa: PLC0415

    block = 16
    nd, cd = s["decode_seqs"], s["decode_context"]
    npf, q, cp = s["prefill_seqs"], s["prefill_query"], s["prefill_context"]
    need = nd * math.ceil((cd + 1) / block) + npf * math.ceil((cp + q) / block)
    spec = forward_model(s)
    key = (spec, dtype, str(device))
    model = _FORWARD_MODELS.get(key)
    if model is None or model.key_caches[0].shape[0] < need:
        _FORWARD_MODELS.clear()
        size = max(64, 1 << max(0, need - 1).bit_length())  # a power of two: few rebuilds
        model = _FORWARD_MODELS[key] = TinyLlama(spec, num_blocks=size, block_size=block, device=device,
                                                 dtype=dtype, seed=0)
    alloc, out = PagedAllocator(model.key_caches[0].shape[0], block), SchedulerOutput()
    for i in range(npf):
        req = Request(i, 0.0, ((i + 1, cp + q),), 8, 8)
        alloc.allocate_slots(req, cp + q)
        req.num_computed_tokens = cp
        out.add(req, q)
    for i in range(npf, npf + nd):
        req = Request(i, 0.0, ((i + 1, cd),), 8, 8)
        alloc.allocate_slots(req, cd + 1)
        req.num_computed_tokens, req.num_generated = cd, 1
        out.add(req, 1)
    executor = StepExecutor(model, alloc, block)
    return lambda: executor.execute(out)

"""Check and time kvsim's Triton kernels on a GPU, against the card's own copy and matmul rates.

    python benchmarks/kernels_gpu.py [--json results.json]     # CUDA: realistic shapes
    python benchmarks/kernels_gpu.py --dry-run                 # no GPU: tiny shapes, interpreter

Every kernel is first checked against its torch reference (kernels/reference.py) on the
shapes it is timed on, then timed with ``triton.testing.do_bench`` (median of the runs,
20th/80th percentiles kept; do_bench warms up and flushes L2 before each run, and the
inputs rotate among copies whose total exceeds twice the L2 size, so L2 never serves
them). Achieved bandwidth and FLOP/s are printed next to the card's measured
device-to-device copy bandwidth and bf16 ``torch.matmul`` rate, with the targets for an
H200: paged decode at batch 64 / context 4096 >= 80% of copy bandwidth, batch 1 /
context 32768 >= 60%, decode_gemv within 10% of torch.matmul (or faster) for M 1-16.

Exit status: 0 when every correctness check passes (targets are reported, not enforced),
1 when a check fails, 2 when no CUDA device is present and --dry-run is not given.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

REAL = dict(
    heads=(32, 8, 128), block_size=16, dtype="bfloat16",  # Llama-3-8B attention
    decode=[(64, 4096, 0.80), (1, 32768, 0.60)],  # (batch, context, target fraction of copy bandwidth)
    gemv_m=[1, 2, 4, 8, 16, 32, 64], gemv_nk=[(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)],
    prefill=[([2048] * 4, [0] * 4), ([2048], [8192]), ([512] * 8, [1024] * 8)],  # (new tokens, cached prefix)
    copy_blocks=4096, write_tokens=[256, 8192], copy_bytes=1 << 30, matmul_n=8192,
)
TINY = dict(
    heads=(4, 2, 64), block_size=16, dtype="bfloat16",
    decode=[(3, 100, 0.80), (1, 300, 0.60)],
    gemv_m=[1, 16], gemv_nk=[(64, 128)],
    prefill=[([20, 7], [0, 16])],
    copy_blocks=4, write_tokens=[5], copy_bytes=1 << 20, matmul_n=64,
)
TOL = dict(atol=3e-2, rtol=2e-2)  # bf16 against fp32-accumulated references


class Bench:
    """Timing, input rotation and result bookkeeping for one run."""

    def __init__(self, torch, triton, device, dry_run: bool):
        self.torch, self.triton, self.device, self.dry_run = torch, triton, device, dry_run
        props = torch.cuda.get_device_properties(device) if device.type == "cuda" else None
        self.l2_bytes = getattr(props, "L2_cache_size", 0) or (60 << 20)
        self.results: list[dict] = []
        self.checks: list[dict] = []
        self.copy_gb_s = self.matmul_tflop_s = float("nan")

    def copies(self, bytes_each: int) -> int:
        """How many input copies make the rotation exceed twice the L2 size (1 in a dry run)."""
        return 1 if self.dry_run else max(1, min(64, math.ceil(2 * self.l2_bytes / max(1, bytes_each))))

    def time_ms(self, fns: list) -> tuple[float, float, float]:
        """(median, p20, p80) milliseconds of calling fns[0], fns[1], ... in rotation."""
        state = {"i": 0}

        def step():
            fns[state["i"] % len(fns)]()
            state["i"] += 1

        if self.dry_run:  # the interpreter: one call, wall clock, only to exercise the path
            t0 = time.perf_counter()
            step()
            ms = (time.perf_counter() - t0) * 1e3
            return ms, ms, ms
        med, p20, p80 = self.triton.testing.do_bench(step, warmup=25, rep=200, quantiles=[0.5, 0.2, 0.8])
        return med, p20, p80

    def check(self, name: str, got, want, **tol) -> None:
        try:
            self.torch.testing.assert_close(got, want, **(tol or TOL))
            ok, msg = True, "ok"
        except AssertionError as e:
            ok, msg = False, str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:4])
        self.checks.append(dict(name=name, ok=ok, message=msg))
        print(f"  check {name:<48} {'ok' if ok else 'FAILED: ' + msg}")

    def record(self, name: str, ms: tuple, *, bytes_moved: float = 0.0, flops: float = 0.0,
               target: str = "", passed: bool | None = None, min_frac_copy: float | None = None,
               **extra) -> dict:
        gb_s = bytes_moved / ms[0] / 1e6 if bytes_moved else None
        tflop_s = flops / ms[0] / 1e9 if flops else None
        frac_copy = gb_s / self.copy_gb_s if gb_s and self.copy_gb_s == self.copy_gb_s else None
        if min_frac_copy is not None:
            target = f">= {min_frac_copy:.0%} of copy bandwidth"
            passed = frac_copy is not None and frac_copy >= min_frac_copy
        row = dict(name=name, ms=ms[0], p20_ms=ms[1], p80_ms=ms[2], gb_s=gb_s, tflop_s=tflop_s,
                   frac_copy_bw=frac_copy,
                   frac_matmul=tflop_s / self.matmul_tflop_s if tflop_s and self.matmul_tflop_s else None,
                   target=target, target_met=passed, **extra)
        self.results.append(row)
        parts = [f"{name:<44} {ms[0] * 1e3:10.1f} us"]
        if gb_s:
            parts.append(f"{gb_s:8.0f} GB/s ({100 * (row['frac_copy_bw'] or 0):5.1f}% of copy)")
        if tflop_s:
            parts.append(f"{tflop_s:7.1f} TFLOP/s ({100 * (row['frac_matmul'] or 0):5.1f}% of matmul)")
        if target:
            parts.append(f"target {target}: {'MET' if passed else 'NOT MET'}")
        print("  " + "  ".join(parts))
        return row


def bench_baselines(b: Bench, cfg: dict) -> None:
    torch = b.torch
    print("baselines")
    n = cfg["copy_bytes"] // 2
    src = torch.randn(n, device=b.device).to(torch.bfloat16)
    dst = torch.empty_like(src)
    ms = b.time_ms([lambda: dst.copy_(src)])
    b.copy_gb_s = 2 * src.numel() * 2 / ms[0] / 1e6
    b.record("device-to-device copy (read + write)", ms, bytes_moved=4 * n)
    m = cfg["matmul_n"]
    x, w = (torch.randn(m, m, device=b.device).to(torch.bfloat16) for _ in range(2))
    ms = b.time_ms([lambda: torch.matmul(x, w)])
    b.matmul_tflop_s = 2 * m**3 / ms[0] / 1e9
    b.record(f"bf16 torch.matmul {m}^3", ms, flops=2 * m**3)


def paged_kv(b: Bench, lens: list[int], cfg: dict, copies: int = 1):
    """Caches holding `lens` tokens per sequence over shuffled blocks; `copies` independent sets."""
    torch = b.torch
    _, hkv, d = cfg["heads"]
    bs, dtype = cfg["block_size"], getattr(torch, cfg["dtype"])
    max_blocks = max(1, max(math.ceil(n / bs) for n in lens))
    num_blocks = len(lens) * max_blocks
    sets = []
    for _ in range(copies):
        k = torch.randn(num_blocks, bs, hkv, d, device=b.device, dtype=dtype)
        v = torch.randn(num_blocks, bs, hkv, d, device=b.device, dtype=dtype)
        table = torch.randperm(num_blocks, device=b.device).to(torch.int32).reshape(len(lens), max_blocks)
        sets.append((k, v, table))
    return sets


def bench_decode(b: Bench, cfg: dict) -> None:
    from kernels import paged_attention_decode
    from kernels.reference import paged_attention_decode_ref

    torch = b.torch
    hq, hkv, d = cfg["heads"]
    dtype = getattr(torch, cfg["dtype"])
    print(f"paged_attention_decode  (Hq={hq}, Hkv={hkv}, D={d}, block {cfg['block_size']}, {cfg['dtype']})")
    for batch, ctx, target in cfg["decode"]:
        kv_bytes = batch * ctx * hkv * d * 2 * dtype.itemsize
        sets = paged_kv(b, [ctx] * batch, cfg, copies=b.copies(kv_bytes))
        seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device=b.device)
        q = torch.randn(batch, hq, d, device=b.device, dtype=dtype)
        k, v, table = sets[0]
        out = paged_attention_decode(q, k, v, table, seq_lens, max_seq_len=ctx)
        b.check(f"decode b{batch} ctx{ctx}", out, paged_attention_decode_ref(q, k, v, table, seq_lens))
        fns = [lambda s=s: paged_attention_decode(q, s[0], s[1], s[2], seq_lens, max_seq_len=ctx, out=out)
               for s in sets]
        ms = b.time_ms(fns)
        moved = kv_bytes + 2 * q.numel() * dtype.itemsize + table.numel() * 4
        b.record(f"decode batch {batch} ctx {ctx}", ms, bytes_moved=moved, flops=4 * batch * hq * ctx * d,
                 min_frac_copy=target)


def bench_gemv(b: Bench, cfg: dict) -> None:
    from kernels import decode_gemv
    from kernels.reference import decode_gemv_ref

    torch = b.torch
    dtype = getattr(torch, cfg["dtype"])
    print(f"decode_gemv vs torch.matmul  ({cfg['dtype']}, y = x W^T, W [N, K])")
    for n, k in cfg["gemv_nk"]:
        ws = [torch.randn(n, k, device=b.device, dtype=dtype) / k**0.5 for _ in range(b.copies(n * k * 2))]
        for m in cfg["gemv_m"]:
            x = torch.randn(m, k, device=b.device, dtype=dtype)
            b.check(f"gemv M={m} N={n} K={k}", decode_gemv(x, ws[0]), decode_gemv_ref(x, ws[0]))
            moved = (n * k + m * k + m * n) * dtype.itemsize
            ours = b.time_ms([lambda w=w: decode_gemv(x, w) for w in ws])
            ref = b.time_ms([lambda w=w: torch.matmul(x, w.t()) for w in ws])
            b.record(f"torch.matmul M={m} N={n} K={k}", ref, bytes_moved=moved, flops=2 * m * n * k)
            passed = ours[0] <= 1.10 * ref[0] if m <= 16 else None
            b.record(f"decode_gemv  M={m} N={n} K={k}", ours, bytes_moved=moved, flops=2 * m * n * k,
                     target="<= 1.10x torch.matmul time" if m <= 16 else "", passed=passed,
                     speedup_vs_matmul=ref[0] / ours[0])


def bench_prefill(b: Bench, cfg: dict) -> None:
    from kernels import prefill_attention
    from kernels.reference import prefill_attention_ref

    torch = b.torch
    hq, hkv, d = cfg["heads"]
    dtype = getattr(torch, cfg["dtype"])
    print("prefill_attention  (causal, cached prefix read through the block table)")
    for q_lens, ctx_lens in cfg["prefill"]:
        k_cache, v_cache, table = paged_kv(b, [c + q for c, q in zip(ctx_lens, q_lens)], cfg)[0]
        t = sum(q_lens)
        q = torch.randn(t, hq, d, device=b.device, dtype=dtype)
        k = torch.randn(t, hkv, d, device=b.device, dtype=dtype)
        v = torch.randn(t, hkv, d, device=b.device, dtype=dtype)
        qsl = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32, device=b.device)
        ctx = torch.tensor(ctx_lens, dtype=torch.int32, device=b.device)
        args = (q, k, v, k_cache, v_cache, table, qsl, ctx)
        name = f"prefill {len(q_lens)}x{q_lens[0]} new, prefix {ctx_lens[0]}"
        out = prefill_attention(*args, max_query_len=max(q_lens))
        b.check(name, out, prefill_attention_ref(*args))
        ms = b.time_ms([lambda: prefill_attention(*args, max_query_len=max(q_lens), out=out)])
        pairs = sum(qn * c + qn * (qn + 1) // 2 for qn, c in zip(q_lens, ctx_lens))  # (query, key) pairs
        b.record(name, ms, flops=4 * hq * d * pairs)


def bench_blocks_and_writes(b: Bench, cfg: dict) -> None:
    from kernels import gather_blocks, scatter_blocks, swap_out_blocks, write_kv_cache
    from kernels.reference import write_kv_cache_ref

    torch = b.torch
    _, hkv, d = cfg["heads"]
    bs, dtype = cfg["block_size"], getattr(torch, cfg["dtype"])
    print(f"copy_blocks and write_kv_cache  (blocks of [{bs}, {hkv}, {d}] {cfg['dtype']})")
    n = cfg["copy_blocks"]
    cache = torch.randn(4 * n, bs, hkv, d, device=b.device, dtype=dtype)
    ids = torch.randperm(4 * n, device=b.device)[:n]
    buf = gather_blocks(cache, ids)
    b.check(f"gather {n} blocks", buf, cache[ids], atol=0, rtol=0)
    size = buf.numel() * dtype.itemsize
    b.record(f"gather_blocks {n} blocks ({size >> 20} MiB)", b.time_ms([lambda: gather_blocks(cache, ids, out=buf)]),
             bytes_moved=2 * size)
    b.record(f"scatter_blocks {n} blocks", b.time_ms([lambda: scatter_blocks(buf, cache, ids)]), bytes_moved=2 * size)
    host = torch.empty(buf.shape, dtype=dtype, pin_memory=b.device.type == "cuda")
    b.record(f"swap_out_blocks {n} blocks to pinned host", b.time_ms([lambda: swap_out_blocks(cache, ids, host, staging=buf)]),
             bytes_moved=size)

    for tokens in cfg["write_tokens"]:
        num_blocks = max(4 * math.ceil(tokens / bs), 8)
        kc = torch.zeros(num_blocks, bs, hkv, d, device=b.device, dtype=dtype)
        vc = torch.zeros_like(kc)
        key = torch.randn(tokens, hkv, d, device=b.device, dtype=dtype)
        value = torch.randn_like(key)
        slots = torch.randperm(num_blocks * bs, device=b.device)[:tokens]
        write_kv_cache(key, value, kc, vc, slots)
        want_k, want_v = torch.zeros_like(kc).cpu(), torch.zeros_like(vc).cpu()
        write_kv_cache_ref(key.cpu(), value.cpu(), want_k, want_v, slots.cpu())
        b.check(f"write_kv_cache {tokens} tokens", (kc.cpu(), vc.cpu()), (want_k, want_v), atol=0, rtol=0)
        ms = b.time_ms([lambda: write_kv_cache(key, value, kc, vc, slots)])
        b.record(f"write_kv_cache {tokens} tokens", ms, bytes_moved=4 * key.numel() * dtype.itemsize)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: run every step on tiny CPU shapes through TRITON_INTERPRET=1")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch
    import triton
    import triton.testing  # noqa: F401  (do_bench)

    if args.dry_run:
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        print("error: no CUDA device; use --dry-run to exercise the script on CPU", file=sys.stderr)
        return 2
    cfg = TINY if args.dry_run else REAL
    torch.manual_seed(0)
    b = Bench(torch, triton, device, args.dry_run)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (triton interpreter, dry run)"
    print(f"device: {name}   triton {triton.__version__}   torch {torch.__version__}")
    print("targets (H200): decode b64/ctx4096 >= 80% of copy bandwidth; b1/ctx32768 >= 60%; "
          "decode_gemv <= 1.10x torch.matmul time for M 1-16")
    bench_baselines(b, cfg)
    bench_decode(b, cfg)
    bench_gemv(b, cfg)
    bench_prefill(b, cfg)
    bench_blocks_and_writes(b, cfg)

    failed = [c["name"] for c in b.checks if not c["ok"]]
    missed = [r["name"] for r in b.results if r["target_met"] is False]
    print(f"checks: {len(b.checks) - len(failed)}/{len(b.checks)} passed"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    print(f"targets: {sum(r['target_met'] is True for r in b.results)} met, {len(missed)} not met"
          + (f" ({', '.join(missed)})" if missed else "") + (" [dry run: timings meaningless]" if args.dry_run else ""))
    if args.json:
        args.json.write_text(json.dumps(dict(
            device=name, dry_run=args.dry_run, triton=triton.__version__, torch=torch.__version__,
            copy_gb_s=b.copy_gb_s, matmul_tflop_s=b.matmul_tflop_s,
            checks=b.checks, results=b.results), indent=2))
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

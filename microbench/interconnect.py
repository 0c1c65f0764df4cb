"""Timing the GPUs' interconnect: ``torch.distributed`` all-reduce, all-gather and send/recv.

``measure`` spawns one process per GPU (``torch.multiprocessing``, rendezvous over TCP on
127.0.0.1), each binds its GPU (NCCL) or stays on the CPU (gloo: the tests run the same code
on two CPU processes), and they time, for each GPU count n of ``counts`` (the first n ranks,
a ``new_group``), every message size of ``sizes``:

- ``allreduce``: ``all_reduce`` (sum) of a ``num_bytes`` tensor;
- ``allgather``: ``all_gather_into_tensor`` whose gathered result is ``num_bytes`` (each rank
  gives ``num_bytes / n``; nccl-tests' S), gloo: ``all_gather`` into views of that result;
- ``sendrecv``: rank 0 sends ``num_bytes`` to rank 1 (one direction), when ``p2p``.

Each case is timed as nccl-tests times one (NVIDIA/nccl-tests doc/PERFORMANCE.md): warm-up
calls, then a host timer around ``iters`` back-to-back calls closed by a device synchronize,
after a barrier (a one-element all-reduce on the same group); ``iters`` comes from a pilot
call so that a repeat lasts about ``target_s``. A repeat's time per call is the slowest
rank's (a MAX all-reduce), and each record holds the median, 20th and 80th percentile of
``repeats`` repeats. Every operation's result is checked once: a wrong sum is an error.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sim.errors import unlink_symlink

KiB, MiB = 1 << 10, 1 << 20
#: message sizes, from latency-bound (a decode step's all-reduce is a few KiB) to bandwidth-bound, doubling
#: over 256 KiB-64 MiB where NCCL changes protocol (each count's all-reduce curve: sim/calib/allreduce_curve.py)
CUDA_SIZES = {False: (4 * KiB, 32 * KiB, *(256 * KiB << i for i in range(9)), 256 * MiB),
              True: (4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 128 * MiB)}
MAX_GPUS = 8


@dataclass(frozen=True)
class Plan:
    """What one spawn measures; ``backend`` nccl (one GPU per rank) or gloo (CPU)."""

    backend: str
    world: int
    counts: tuple[int, ...]
    sizes: tuple[int, ...]
    p2p: bool = True
    repeats: int = 5
    target_s: float = 0.005
    warmup: int = 2
    max_iters: int = 200
    timeout_s: float = 300.0


def gpu_counts(visible: int) -> tuple[int, ...]:
    """The GPU counts to time on ``visible`` GPUs: powers of two from 2 up to min(visible, 8)."""
    out, n = [], 2
    while n <= min(visible, MAX_GPUS):
        out.append(n)
        n *= 2
    return tuple(out)


def cuda_plan(visible: int, quick: bool) -> Plan:
    """The default grid on ``visible`` (>= 2) GPUs: about a minute on 8, under half that with ``quick``."""
    counts = gpu_counts(visible)
    return Plan("nccl", counts[-1], counts, CUDA_SIZES[quick], repeats=3 if quick else 5,
                target_s=0.002 if quick else 0.005)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(plan: Plan) -> list[dict]:
    """Spawn ``plan.world`` processes, time the plan, return rank 0's records (module docstring)."""
    import torch.multiprocessing as mp  # noqa: PLC0415

    if plan.backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback: no host name lookup
    with tempfile.TemporaryDirectory(prefix="microbench-interconnect-") as tmp:
        out = Path(tmp) / "records.json"
        mp.spawn(_worker, args=(plan, _free_port(), str(out)), nprocs=plan.world, join=True)
        return json.loads(out.read_text())


def _worker(rank: int, plan: Plan, port: int, out: str) -> None:
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    cuda = plan.backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group(plan.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=plan.world, timeout=timedelta(seconds=plan.timeout_s))
    try:
        # every rank creates every group, in the same order (torch.distributed requires it)
        groups = {n: dist.group.WORLD if n == plan.world else dist.new_group(list(range(n))) for n in plan.counts}
        t = _Timer(torch, dist, device, plan)
        records = []
        for n in plan.counts:
            if rank < n:
                for kernel in ("allreduce", "allgather"):
                    records += [t.case(kernel, n, size, groups[n], rank) for size in plan.sizes]
            t.barrier(dist.group.WORLD)
        if plan.p2p and 2 in groups:
            if rank < 2:
                records += [t.case("sendrecv", 2, size, groups[2], rank) for size in plan.sizes]
            t.barrier(dist.group.WORLD)
        if rank == 0:
            unlink_symlink(out)
            Path(out).write_text(json.dumps(records))
    finally:
        dist.destroy_process_group()


class _Timer:
    """One rank's timing loop (module docstring)."""

    def __init__(self, torch, dist, device, plan: Plan) -> None:
        self.torch, self.dist, self.device, self.plan = torch, dist, device, plan
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        self.itemsize = torch.empty(0, dtype=self.dtype).element_size()
        self.one = torch.zeros(1, device=device)  # the barrier: a one-element all-reduce

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self, group) -> None:
        self.dist.all_reduce(self.one, group=group)
        self.sync()

    def _slowest(self, values: list[float], group) -> list[float]:
        x = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(x, op=self.dist.ReduceOp.MAX, group=group)
        return x.tolist()

    def _loop(self, op, iters: int, group) -> float:
        self.barrier(group)
        t0 = time.perf_counter()
        for _ in range(iters):
            op()
        self.sync()
        return (time.perf_counter() - t0) / iters

    def _op(self, kernel: str, n: int, num_bytes: int, group, rank: int):
        """(the timed call, a check of its result)."""
        torch, dist = self.torch, self.dist
        elems = max(n, num_bytes // self.itemsize)
        elems -= elems % n  # all-gather: equal shares
        if kernel == "allreduce":
            x = torch.full((elems,), float(rank + 1), dtype=self.dtype, device=self.device)

            def check():
                x.fill_(rank + 1)
                dist.all_reduce(x, group=group)
                return float(x[0]) == n * (n + 1) / 2 and float(x[-1]) == n * (n + 1) / 2
            return (lambda: dist.all_reduce(x, group=group)), check
        if kernel == "allgather":
            share = torch.full((elems // n,), float(rank), dtype=self.dtype, device=self.device)
            whole = torch.empty(elems, dtype=self.dtype, device=self.device)
            views = list(whole.chunk(n))
            if self.device.type == "cuda":
                def op():
                    dist.all_gather_into_tensor(whole, share, group=group)
            else:
                def op():
                    dist.all_gather(views, share, group=group)

            def check():
                whole.fill_(-1)
                op()
                return all(float(v[0]) == i and float(v[-1]) == i for i, v in enumerate(views))
            return op, check
        buf = torch.full((elems,), 7.0 if rank == 0 else 0.0, dtype=self.dtype, device=self.device)

        def op():
            if rank == 0:
                dist.send(buf, 1)
            else:
                dist.recv(buf, 0)

        def check():
            op()
            self.sync()
            return rank == 0 or (float(buf[0]) == 7.0 and float(buf[-1]) == 7.0)
        return op, check

    def case(self, kernel: str, n: int, num_bytes: int, group, rank: int) -> dict:
        """One record: the time per call of ``kernel`` over the first ``n`` ranks (module docstring)."""
        plan = self.plan
        op, check = self._op(kernel, n, num_bytes, group, rank)
        for _ in range(plan.warmup):
            op()
        pilot = self._slowest([self._loop(op, 1, group)], group)[0]
        iters = max(1, min(plan.max_iters, math.ceil(plan.target_s / max(pilot, 1e-9))))
        samples = self._slowest([self._loop(op, iters, group) for _ in range(plan.repeats)], group)
        ok = check()
        self.sync()
        bad = self._slowest([0.0 if ok else 1.0], group)[0]
        if bad:
            raise RuntimeError(f"{kernel} over {n} ranks of {num_bytes} bytes gave a wrong result")
        q = statistics.quantiles(samples, n=5, method="inclusive") if len(samples) > 1 else [samples[0]] * 4
        elems = max(n, num_bytes // self.itemsize)
        return {"kernel": kernel, "num_gpus": n, "num_bytes": (elems - elems % n) * self.itemsize, "time_s": statistics.median(samples),
                "p20_s": q[0], "p80_s": q[3], "repeats": len(samples), "iters": iters, "backend": plan.backend,
                "dtype": str(self.dtype).removeprefix("torch."), "source": "microbench"}

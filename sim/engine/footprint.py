"""A run's memory, estimated before it starts, against what this machine has.

A scenario can ask for more than the machine holds (two million offline requests; 256
replicas of PP 8 x TP 8, each with its own KV pool's per-block state) and then grows for
minutes before the kernel kills it. ``sim run`` estimates the peak from the scenario and
refuses one past the memory available (exit 2, one line with the numbers), and says so on
stderr when it will take a good share of it. The per-item figures are measured peaks
(``/usr/bin/time``, 2-core VM, 2026-12-06, Python 3.11, the chatbot scenario):

* a request still queued or running: ~2.2 KB (offline arrivals, every request at once:
  50,000 -> 200,000 requests, 165 -> 488 MB); a finished one is ~0.4 KB in the columnar log
  (Poisson at a served rate: 137 -> 194 MB). The estimate takes every request as queued:
  an overloaded open-loop run comes close to it.
* a KV block of a replica's pool: ~150 B (the allocator's per-block lists; 4M blocks took
  about 0.6 GB).
"""

from __future__ import annotations

import os

from sim.errors import ConfigError

BASE_BYTES = 150 << 20  # the interpreter, numpy, simpy and the simulator's modules
QUEUED_REQUEST_BYTES = 2_200
BLOCK_BYTES = 150
#: A run estimated above this share of the available memory, or above WARN_BYTES, is announced on stderr.
WARN_SHARE, WARN_BYTES = 0.5, 1 << 30


def _turns_bound(conversation) -> int:
    if conversation is None:
        return 1
    dist = conversation.turns
    for attr in ("max", "high", "value"):
        value = getattr(dist, attr, None)
        if value:
            return int(value)
    return 1


def expected_requests(sc) -> int | None:
    """How many requests the scenario makes at most (None: a trace, bounded by its file)."""
    wl = sc.workload
    n = wl.num_requests
    rate = getattr(wl.arrival, "rate", None) if wl.arrival is not None else None
    if wl.duration_s is not None and rate:
        by_time = int(rate * wl.duration_s) + 1
        n = by_time if n is None else min(n, by_time)
    return None if n is None else n * _turns_bound(wl.conversation)


def available_bytes() -> int | None:
    """MemAvailable (Linux), else the physical memory; None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def estimate_bytes(sc, num_gpu_blocks: int) -> tuple[int, str]:
    """(peak bytes, how they add up) of a run of ``sc`` whose replicas' pools hold
    ``num_gpu_blocks`` blocks each."""
    n = expected_requests(sc) or 0
    pools = sc.cluster.num_replicas  # (a pipeline's stages share their replica's block table)
    blocks = pools * num_gpu_blocks
    total = BASE_BYTES + n * QUEUED_REQUEST_BYTES + blocks * BLOCK_BYTES
    parts = [f"{n:,} requests x {QUEUED_REQUEST_BYTES / 1e3:.1f} KB"] if n else []
    parts.append(f"{pools:,} KV pools x {num_gpu_blocks:,} blocks x {BLOCK_BYTES} B")
    return total, " + ".join(parts)


def check_footprint(sc, num_gpu_blocks: int, available: int | None = None) -> str | None:
    """Refuse a run estimated past the memory available (ConfigError); return a warning line
    when it takes more than WARN_SHARE of it or more than WARN_BYTES (None otherwise)."""
    available = available_bytes() if available is None else available
    if not available:
        return None
    need, how = estimate_bytes(sc, num_gpu_blocks)
    if need > available:
        requests_bytes = (expected_requests(sc) or 0) * QUEUED_REQUEST_BYTES
        blocks_bytes = sc.cluster.num_replicas * num_gpu_blocks * BLOCK_BYTES
        key = "workload.num_requests" if requests_bytes >= blocks_bytes else "cluster.num_replicas"
        raise ConfigError(sc.source_path, key, (
            f"the run would need about {need / 2**30:.1f} GiB ({how}) and this machine has {available / 2**30:.1f} "
            "GiB available; simulate fewer requests (the rates and percentiles settle long before) or fewer replicas"))
    if need > WARN_SHARE * available or need > WARN_BYTES:
        return (f"note: this run may take about {need / 2**30:.1f} GiB of the {available / 2**30:.1f} GiB available "
                f"({how})")
    return None

"""``sim kv --offload-gb N``: a CPU tier of N GiB in the memory plan (#43): its blocks and
tokens at this model's block size, against the host memory (``--host-memory-gb``, else
HOST_GIB_PER_GPU per GPU of ``--tp``). Past it: one ConfigError line, exit 2, as ``sim run``
refuses a scenario's ``kv.offload`` (sim/engine/host_memory.py; ``sim run`` adds the swap space)."""

from __future__ import annotations

import math
from typing import Any

from sim.engine.host_memory import HOST_GIB_PER_GPU, WARN_SHARE
from sim.errors import ConfigError

CLI = "<cli>"


def add_offload_args(p) -> None:
    p.add_argument("--offload-gb", default=None, metavar="GIB",
                   help="a CPU KV tier of GIB GiB of host memory (kv.offload): its blocks, tokens and share of"
                        " the host memory")
    p.add_argument("--host-memory-gb", default=None, metavar="GIB",
                   help=f"with --offload-gb: the machine's host memory (default {HOST_GIB_PER_GPU} GiB per GPU"
                        " of --tp)")


def _gib(value: str, flag: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(CLI, flag, f"expected a number of GiB, got {value!r}") from None
    if not (x > 0 and math.isfinite(x) and x <= 1 << 20):
        raise ConfigError(CLI, flag, f"must be in (0, 1048576] GiB, got {value}")
    return x


def offload_fields(args, bytes_per_block: int, block_size: int, tp: int) -> dict[str, Any]:
    """The tier's fields of ``sim kv``'s report ({} without --offload-gb)."""
    if getattr(args, "offload_gb", None) is None:
        if getattr(args, "host_memory_gb", None) is not None:
            raise ConfigError(CLI, "--host-memory-gb", "applies with --offload-gb only")
        return {}
    tier_gib = _gib(args.offload_gb, "--offload-gb")
    host = (_gib(args.host_memory_gb, "--host-memory-gb") if args.host_memory_gb is not None
            else HOST_GIB_PER_GPU * tp) * 2**30
    blocks = int(tier_gib * 2**30) // bytes_per_block
    tier_bytes = blocks * bytes_per_block
    if tier_bytes > host:
        raise ConfigError(CLI, "--offload-gb", (
            f"a {tier_gib:g} GiB CPU tier is more than the {host / 2**30:.1f} GiB of host memory"
            f"{'' if args.host_memory_gb is not None else f' (the default {HOST_GIB_PER_GPU} GiB per GPU x {tp})'}; "
            "give --host-memory-gb the machine's"))
    return {"kv_offload_blocks": blocks, "kv_offload_tokens": blocks * block_size,
            "kv_offload_host_bytes": tier_bytes, "host_memory_bytes": int(host),
            "kv_offload_host_share": tier_bytes / host}


def offload_rows(r: dict[str, Any], human) -> list[tuple[str, str]]:
    if "kv_offload_blocks" not in r:
        return []
    share = r["kv_offload_host_share"]
    note = " (little left to the OS and the engine)" if share > WARN_SHARE else ""
    return [("CPU tier (kv.offload)", f"{human(r['kv_offload_host_bytes'])}: {r['kv_offload_blocks']:,} blocks, "
                                      f"{r['kv_offload_tokens']:,} tokens"),
            ("  of the host memory", f"{share:.0%} of {human(r['host_memory_bytes'])}{note}")]

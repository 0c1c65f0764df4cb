"""The host-RAM check of ``kv.offload`` (#43): the CPU tier and the swap space against the
machine's host memory.

vLLM allocates both in pinned host memory when the engine starts (``--kv-offloading-size``,
``--swap-space``), so what counts is their capacity, not what a run happens to fill.
The machine's host memory is ``engine.host_memory_gb``, else HOST_GIB_PER_GPU per GPU of the
engine: cloud GPU nodes give each GPU 112-256 GiB (AWS p4d.24xlarge: 1,152 GiB for 8 A100s,
144 each; Azure ND96asr A100 v4: 900 GiB, 112 each; AWS p5.48xlarge and DGX A100/H100: 2 TiB,
256 each), so 128 GiB is a conservative share. Past it the run is refused (ConfigError,
exit 2); past WARN_SHARE of it, a note on stderr says so.
"""

from __future__ import annotations

from sim.config.offload_schema import offload_tiers
from sim.errors import ConfigError

HOST_GIB_PER_GPU = 128
#: Pinned host memory above this share of the machine's leaves too little to the OS, the engine's
#: processes and the page cache (a disk tier reads through it): `sim run` says so on stderr.
WARN_SHARE = 0.8


def host_memory_bytes(sc) -> tuple[int, str]:
    """The engine's host memory in bytes, and where the figure comes from."""
    if sc.engine.host_memory_gb is not None:
        return int(sc.engine.host_memory_gb * 2**30), "engine.host_memory_gb"
    gpus = sc.engine.tensor_parallel_size
    return gpus * HOST_GIB_PER_GPU * 2**30, f"the default {HOST_GIB_PER_GPU} GiB per GPU x {gpus}"


def host_plan(sc, bytes_per_block: int, block_size: int) -> dict | None:
    """The host side of the memory plan with ``kv.offload`` (None without): the CPU tier's
    pinned bytes, the swap space, the disk tier's bytes (on disk, not in RAM) and the machine's."""
    tiers = offload_tiers(sc.kv.offload)
    if not tiers:
        return None
    sizes = {t.tier: t.capacity_blocks(block_size, bytes_per_block) * bytes_per_block for t in tiers}
    have, source = host_memory_bytes(sc)
    swap = int(sc.kv.swap_space_gb * 2**30)
    plan = {"host_memory_bytes": have, "host_memory_source": source,
            "kv_offload_host_bytes": sizes["cpu"], "swap_space_bytes": swap,
            "host_pinned_bytes": sizes["cpu"] + swap}
    if "disk" in sizes:
        plan["kv_offload_disk_bytes"] = sizes["disk"]
    return plan


def check_host_memory(sc, bytes_per_block: int, block_size: int) -> str | None:
    """Refuse a CPU tier (with the swap space) past the host memory (ConfigError naming the key
    and the numbers); a note when it takes more than WARN_SHARE of it; None otherwise."""
    plan = host_plan(sc, bytes_per_block, block_size)
    if plan is None:
        return None
    need, have = plan["host_pinned_bytes"], plan["host_memory_bytes"]
    what = (f"the CPU tier's {plan['kv_offload_host_bytes'] / 2**30:.1f} GiB + kv.swap_space_gb "
            f"{plan['swap_space_bytes'] / 2**30:.1f} GiB = {need / 2**30:.1f} GiB of pinned host memory")
    if need > have:
        key = "kv.offload.capacity_gb" if _cpu_tier(sc).capacity_gb is not None else "kv.offload.capacity_tokens"
        raise ConfigError(sc.source_path, key, (
            f"{what}, more than the {have / 2**30:.1f} GiB of host memory ({plan['host_memory_source']}); "
            "shrink the tier or set engine.host_memory_gb to the machine's"))
    if need > WARN_SHARE * have:
        return (f"note: {what} is {need / have:.0%} of the {have / 2**30:.1f} GiB of host memory "
                f"({plan['host_memory_source']}): little is left to the OS and the engine's processes")
    return None


def _cpu_tier(sc):
    return offload_tiers(sc.kv.offload)[0]

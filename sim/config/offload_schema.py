"""``kv.offload``: lower KV tiers behind the GPU prefix cache (sim/kv/offload.py, #43).

One tier (a mapping) or several, fastest first (a list: a CPU tier, then a disk tier):

    kv:
      prefix_caching: true          # required: the tiers are looked up by the same block hashes
      offload:
        - tier: cpu                 # host memory
          capacity_gb: 64           # or capacity_tokens: 2000000 (exactly one of them)
          store: evicted            # every evicted cached block | reused: only blocks hit before
          eviction: lru             # the tier's own eviction when full
          bandwidth_gb_per_s: 25    # optional: the host link (default: the calibration's
                                    # pcie_bandwidth_bytes_per_s)
          latency_s: 2.0e-5         # optional: fixed cost of one transfer (default: one copy
                                    # per layer, K and V, at the cost model's copy latency)
        - tier: disk                # local NVMe: what the CPU tier evicts goes here
          capacity_gb: 1000
          bandwidth_gb_per_s: 7.0   # optional: reads (default DISK_READ_GB_PER_S)
          write_bandwidth_gb_per_s: 4.3  # optional: writes (default DISK_WRITE_GB_PER_S)
          latency_s: 1.0e-4         # optional (default DISK_LATENCY_S)
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, Tag, model_validator

from sim.config.limits import FrozenModel, nonneg_float, pos_float, pos_int

#: A disk tier's defaults: one PCIe 4.0 enterprise NVMe drive's datasheet figures (Intel D7-P5500:
#: 7,000 MB/s sequential read, 4,300 MB/s sequential write) and a 4 KB random read's access
#: latency, ~85 us for Intel's P4500 (Lenovo's product guide), rounded up to 100 us for the file system.
DISK_READ_GB_PER_S, DISK_WRITE_GB_PER_S, DISK_LATENCY_S = 7.0, 4.3, 1.0e-4


class OffloadConfig(FrozenModel):
    """A lower tier behind the GPU prefix cache, looked up by the same block hashes (so it needs
    ``kv.prefix_caching``): `cpu` stores the GPU's evicted cached blocks, `disk` (after a `cpu` tier)
    the CPU tier's; a request whose prefix a tier holds loads those blocks instead of prefilling them."""

    tier: Literal["cpu", "disk"] = Field(
        description="`cpu` (host memory) or `disk` (local NVMe, after a `cpu` tier: it stores the blocks the CPU "
                    "tier evicts, and its hits are read into host memory, then copied to the GPU).")
    capacity_gb: pos_float("kv.offload.capacity_gb") | None = Field(
        None, description="The tier's size in GiB (host memory for `cpu`, disk for `disk`; or `capacity_tokens`: "
                          "exactly one of them).")
    capacity_tokens: pos_int("kv.offload.capacity_tokens") | None = Field(
        None, description="The tier's size in tokens (or `capacity_gb`: exactly one of them).")
    store: Literal["evicted", "reused"] = Field(
        "evicted", description="`evicted`: every cached block the GPU evicts; `reused`: only those hit since "
                               "they were cached (`cpu` only: a disk tier stores what the CPU tier evicts).")
    eviction: Literal["lru"] = Field("lru", description="The tier's own eviction when it is full.")
    warm: bool = Field(
        False, description="`cpu` only: the run is the second of two with the same requests (a benchmark that "
                           "omits its warm-up): each request's prompt blocks are in the tier when it first looks, "
                           "put there without link time or stores (as many as the capacity holds).")
    bandwidth_gb_per_s: pos_float("kv.offload.bandwidth_gb_per_s") | None = Field(
        None, description="`cpu`: the host link, in GB/s (unset: the calibration's fitted block copies `swap_in` / `swap_out`, else its `pcie_bandwidth_bytes_per_s`); "
                          f"`disk`: its reads (unset: {DISK_READ_GB_PER_S:g}, an NVMe drive's datasheet).")
    write_bandwidth_gb_per_s: pos_float("kv.offload.write_bandwidth_gb_per_s") | None = Field(
        None, description=f"`disk` only: its writes, in GB/s (unset: {DISK_WRITE_GB_PER_S:g}).")
    latency_s: nonneg_float("kv.offload.latency_s") | None = Field(
        None, description="Fixed cost of one transfer, in seconds (unset: `cpu`, one copy per layer, K and V, at "
                          f"the cost model's copy latency; `disk`, {DISK_LATENCY_S:g}).")

    @model_validator(mode="after")
    def _one_capacity(self):
        if (self.capacity_gb is None) == (self.capacity_tokens is None):
            raise ValueError("give exactly one of capacity_gb (GiB of host memory) or capacity_tokens")
        if self.tier == "disk" and self.store != "evicted":
            raise ValueError("a disk tier stores what the CPU tier evicts: store 'reused' is for tier cpu")
        if self.tier == "disk" and self.warm:
            raise ValueError("warm is the CPU tier's (tier cpu): a disk tier starts empty")
        if self.tier == "cpu" and self.write_bandwidth_gb_per_s is not None:
            raise ValueError("write_bandwidth_gb_per_s is a disk tier's (the host link is full duplex)")
        return self

    def capacity_blocks(self, block_size: int, bytes_per_block: int) -> int:
        """The tier's size in whole GPU blocks."""
        if self.capacity_tokens is not None:
            return self.capacity_tokens // block_size
        return int(self.capacity_gb * 2**30) // bytes_per_block


#: ``kv.offload``: one tier (a mapping) or a list of them. The tags start with "<": error
#: locations drop them (sim/config/scenario.py), so a bad key reads kv.offload.1.capacity_gb.
OffloadTiers = Annotated[
    Union[Annotated[OffloadConfig, Tag("<mapping>")], Annotated[list[OffloadConfig], Tag("<list>")]],
    Discriminator(lambda v: "<list>" if isinstance(v, list) else "<mapping>")]


def offload_tiers(offload) -> list[OffloadConfig]:
    """``kv.offload`` as a list of tiers, fastest first ([] when unset)."""
    if offload is None:
        return []
    return [offload] if isinstance(offload, OffloadConfig) else list(offload)

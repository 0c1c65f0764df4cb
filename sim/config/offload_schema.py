"""``kv.offload``: a CPU tier behind the GPU prefix cache (sim/kv/offload.py, #43).

    kv:
      prefix_caching: true          # required: the tier is looked up by the same block hashes
      offload:
        tier: cpu                   # the only tier so far (disk: not built)
        capacity_gb: 64             # or capacity_tokens: 2000000 (exactly one of them)
        store: evicted              # every evicted cached block | reused: only blocks hit before
        eviction: lru               # the tier's own eviction when full
        bandwidth_gb_per_s: 25      # optional: the host link (default: the calibration's
                                    # pcie_bandwidth_bytes_per_s)
        latency_s: 2.0e-5           # optional: fixed cost of one transfer (default: one copy
                                    # per layer, K and V, at the cost model's copy latency)
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sim.config.limits import FrozenModel, nonneg_float, pos_float, pos_int


class OffloadConfig(FrozenModel):
    """A CPU tier behind the GPU prefix cache, looked up by the same block hashes (so it needs
    ``kv.prefix_caching``): the GPU's evicted cached blocks are stored there, and a request whose
    prefix the tier holds loads those blocks over the host link instead of prefilling them."""

    tier: Literal["cpu"] = Field(description="The tier: `cpu` (host memory), the only one so far.")
    capacity_gb: pos_float("kv.offload.capacity_gb") | None = Field(
        None, description="The tier's size in GiB of host memory (or `capacity_tokens`: exactly one of them).")
    capacity_tokens: pos_int("kv.offload.capacity_tokens") | None = Field(
        None, description="The tier's size in tokens (or `capacity_gb`: exactly one of them).")
    store: Literal["evicted", "reused"] = Field(
        "evicted", description="`evicted`: every cached block the GPU evicts; `reused`: only those hit since "
                               "they were cached.")
    eviction: Literal["lru"] = Field("lru", description="The tier's own eviction when it is full.")
    bandwidth_gb_per_s: pos_float("kv.offload.bandwidth_gb_per_s") | None = Field(
        None, description="The host link, in GB/s (unset: the calibration's `pcie_bandwidth_bytes_per_s`).")
    latency_s: nonneg_float("kv.offload.latency_s") | None = Field(
        None, description="Fixed cost of one transfer, in seconds (unset: one copy per layer, K and V, at the "
                          "cost model's copy latency).")

    @model_validator(mode="after")
    def _one_capacity(self):
        if (self.capacity_gb is None) == (self.capacity_tokens is None):
            raise ValueError("give exactly one of capacity_gb (GiB of host memory) or capacity_tokens")
        return self

    def capacity_blocks(self, block_size: int, bytes_per_block: int) -> int:
        """The tier's size in whole GPU blocks."""
        if self.capacity_tokens is not None:
            return self.capacity_tokens // block_size
        return int(self.capacity_gb * 2**30) // bytes_per_block

"""The CPU swap space: ``swap_space_gb`` of pinned host memory for preempted KV, and how
swapped blocks cross PCIe (``SwapTransfer``)."""

from __future__ import annotations

from enum import StrEnum


class SwapTransfer(StrEnum):
    """How a swapped request's KV blocks cross PCIe.

    * ``per-block``: one copy per block, per layer, for K and V (vLLM v0's swap_blocks):
      small blocks mean many small copies, each paying the copy's fixed cost.
    * ``gathered``: a device kernel packs the request's blocks into one staging buffer
      per layer for K and V (``kernels.gather_blocks``), then one copy each moves it;
      swap-in is the reverse (``kernels.scatter_blocks``). Fewer, larger copies for one
      extra device-memory pass.
    """

    PER_BLOCK = "per-block"
    GATHERED = "gathered"


class SwapSpace:
    """Byte accounting of swapped-out requests. ``used + free == capacity`` always."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be >= 0, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._held: dict[int, int] = {}  # request_id -> bytes
        self.peak_used_bytes = 0

    def reserve(self, request_id: int, num_bytes: int) -> bool:
        if self.used_bytes + num_bytes > self.capacity_bytes:
            return False
        self._held[request_id] = num_bytes
        self.used_bytes += num_bytes
        self.peak_used_bytes = max(self.peak_used_bytes, self.used_bytes)
        return True

    def release(self, request_id: int) -> int:
        num_bytes = self._held.pop(request_id)
        self.used_bytes -= num_bytes
        return num_bytes

    def check_invariants(self) -> None:
        assert self.used_bytes == sum(self._held.values()), "swap accounting drifted"
        assert 0 <= self.used_bytes <= self.capacity_bytes, "swap space over capacity"

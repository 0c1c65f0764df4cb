"""All-reduces between GPUs without peer-to-peer access: NCCL's host-staged (SHM) path.

Where the GPUs of a tensor-parallel replica cannot reach each other's memory (GeForce cards,
many VMs and container platforms, some PCIe topologies: vLLM logs "Custom allreduce is disabled
because your platform lacks GPU P2P capability"), the engines' own all-reduce kernels are off and
NCCL moves every byte through pinned host memory (its SHM transport: ``via SHM/direct/direct``):
a rank writes its chunk over its PCIe link into a host buffer, the next rank reads it back over its
own, reduces and passes it on. So each byte crosses PCIe twice, the host's memory sits in the
middle, and each step waits on flags in host memory: a latency floor of about 12 us a call and a
bandwidth set by the PCIe links, well below what one pinned copy reaches.

The model (``host_staged_interconnect``) is one measured curve scaled to the GPU's host link:

- **Measured**: nccl-tests ``all_reduce_perf -b 8 -e 1024M -f 2 -g 2`` on two RTX 2080 Ti whose
  peer access is unavailable (``nvidia-smi topo -p2p``: NS; ``p2pBandwidthLatencyTest``: "CANNOT
  Access Peer"), PCIe Gen3 x16 behind one switch (PIX), NCCL over SHM; out-of-place times
  ``MEASURED`` below. The same machine's ``bandwidthTest`` pinned copies: 12.2 GB/s host to
  device, 13.2 device to host (``MEASURED_HOST_COPY_BYTES_PER_S``, their mean). Source:
  Anthony-Hoo/Anthony-Hoo.github.io posts/AutoDL_Multi-GPU_Interconnection_Test.md @ 37e805e
  (2025-06-05; CUDA 12.4, driver 550.90.07). Its 8 B - 4 KiB times are 11.6-12.9 us (median
  11.8: ``FLOOR_S``); the time then grows to a busbw of 4.00 GB/s from 64 MiB on, 0.31 of the
  pinned copy rate.
- **Scaled**: on a GPU whose calibration's ``pcie_bandwidth_bytes_per_s`` (its achieved pinned
  copy rate) is B, the part of each time above the floor is multiplied by
  ``MEASURED_HOST_COPY_BYTES_PER_S / B`` (the bytes move over the host link), the floor kept (it is
  the host round trip's: flags and fences over PCIe, the same on any generation).
- **GPU counts**: a ring over n GPUs moves 2 (n - 1) / n of the bytes per rank (1 at two GPUs) in
  2 (n - 1) steps (2 at two GPUs), so the time above the floor is multiplied by 2 (n - 1) / n and
  the floor by n - 1. Only two GPUs were measured; the other counts are this extrapolation.

Corroboration (not used to fit): 4 A100-SXM4 of a DGX A100 with ``NCCL_P2P_DISABLE=1`` (NCCL
2.16.2) reach a busbw of 5.2 GB/s at 1-8 GiB; the model gives 7.9 GB/s at 25 GB/s pinned copies,
3.9 GB/s if the two GPUs behind each of the DGX's PCIe switches share its x16 uplink (they do on the
host side of an SHM transfer). Nothing here is fitted on the published cases that use it.

A scenario names the path with ``engine.gpu_p2p: false`` (sim/config/engine_schema.py); the run's
calibration then takes this interconnect in place of its own (``without_p2p``). Pure.
"""

from __future__ import annotations

import dataclasses

from sim.calib.allreduce_curve import AllReduceCurve
from sim.calib.interconnect import SHM, CountNumbers, Interconnect
from sim.errors import ConfigError

#: The link name of the host-staged interconnect (not one a calibration file may give: sim/calib/interconnect.py)
SHM_LINK = SHM
#: nccl-tests all_reduce_perf at two GPUs without peer access, out-of-place: (bytes, microseconds)
#: (module docstring); from 4 KiB, where the time starts to leave the floor.
MEASURED = ((4096, 11.79), (8192, 13.07), (16384, 17.11), (32768, 24.62), (65536, 40.10), (131072, 56.90),
            (262144, 86.04), (524288, 150.2), (1048576, 279.5), (2097152, 539.6), (4194304, 1065.1),
            (8388608, 2113.2), (16777216, 4209.7), (33554432, 8399.7), (67108864, 16801.0), (134217728, 33587.0))
#: The measured machine's pinned host copies: (12.2 + 13.2) / 2 GB/s (bandwidthTest, module docstring)
MEASURED_HOST_COPY_BYTES_PER_S = 12.7e9
#: The median of the measured 8 B - 4 KiB times (11.61-12.86 us): one host-staged call's floor at two GPUs
FLOOR_S = 11.8e-6
#: The measured busbw past the last points: 64 MiB over (33,587 - 16,801) us
MEASURED_BUSBW_BYTES_PER_S = (MEASURED[-1][0] - MEASURED[-2][0]) / ((MEASURED[-1][1] - MEASURED[-2][1]) * 1e-6)
COUNTS = (2, 4, 8)  # the tensor-parallel sizes a scenario may name


def _ring(num_gpus: int) -> tuple[float, float]:
    """(bytes per rank relative to two GPUs, steps relative to two GPUs) of a ring over ``num_gpus``."""
    return 2.0 * (num_gpus - 1) / num_gpus, float(num_gpus - 1)


def host_staged_curve(host_copy_bytes_per_s: float, num_gpus: int = 2) -> AllReduceCurve:
    """The measured curve scaled to a host link of ``host_copy_bytes_per_s`` and ``num_gpus`` GPUs
    (module docstring)."""
    scale = MEASURED_HOST_COPY_BYTES_PER_S / host_copy_bytes_per_s
    per_byte, steps = _ring(num_gpus)
    times = tuple(FLOOR_S * steps + max(0.0, t * 1e-6 - FLOOR_S) * scale * per_byte for _, t in MEASURED)
    return AllReduceCurve(tuple(float(s) for s, _ in MEASURED), times)


def host_staged_busbw(host_copy_bytes_per_s: float) -> float:
    """The host-staged all-reduce's bus bandwidth for large messages on a host link of that rate."""
    return MEASURED_BUSBW_BYTES_PER_S * host_copy_bytes_per_s / MEASURED_HOST_COPY_BYTES_PER_S


def host_staged_interconnect(host_copy_bytes_per_s: float) -> Interconnect:
    """The interconnect of GPUs without peer access whose host link copies at ``host_copy_bytes_per_s``:
    every all-reduce and all-gather on NCCL's host-staged path (module docstring); no p2p numbers."""
    counts = tuple((n, CountNumbers(allreduce_latency_s=FLOOR_S * _ring(n)[1], allgather_latency_s=FLOOR_S * _ring(n)[1],
                                    allreduce_curve=host_staged_curve(host_copy_bytes_per_s, n))) for n in COUNTS)
    return Interconnect(allreduce_bus_bandwidth_bytes_per_s=host_staged_busbw(host_copy_bytes_per_s),
                        allreduce_latency_s=FLOOR_S, link=SHM_LINK, by_num_gpus=counts,
                        source="sim/calib/host_staged.py: NCCL's SHM path, measured without P2P, scaled to the host link")


def without_p2p(cal, gpu_p2p: bool, tensor_parallel_size: int, pipeline_parallel_size: int, file: str):
    """``cal`` as the run uses it: with ``gpu_p2p`` false and several tensor-parallel GPUs, its
    interconnect replaced (or, where it has none, given) the host-staged one at its
    ``pcie_bandwidth_bytes_per_s``; else ``cal``.
    ConfigError on ``engine.gpu_p2p`` with pipeline parallelism (its stage sends are not modelled on it)."""
    if gpu_p2p:
        return cal
    if pipeline_parallel_size > 1:
        raise ConfigError(file, "engine.gpu_p2p", (
            f"false with pipeline_parallel_size {pipeline_parallel_size}: the stages' sends without peer access are "
            "not modelled; allowed: gpu_p2p false with pipeline_parallel_size 1, or gpu_p2p true"))
    if tensor_parallel_size <= 1:
        return cal
    return dataclasses.replace(cal, interconnect=host_staged_interconnect(cal.pcie_bandwidth_bytes_per_s))


__all__ = ["COUNTS", "FLOOR_S", "MEASURED", "MEASURED_HOST_COPY_BYTES_PER_S", "SHM_LINK", "host_staged_busbw",
           "host_staged_curve", "host_staged_interconnect", "without_p2p"]

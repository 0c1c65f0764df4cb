"""The GEMM's memory side with an L2: an optional term of the fitted GEMM form.

The plain form reads a GEMM's bytes (x, W and y once each) at ``bandwidth_bytes_per_s``. NVIDIA's
kernel tables time a GEMM by rerunning it on the same operands, so operands that fit the L2 are read
from there. With ``l2_resident_bytes`` > 0 a share

    hit = 1 / (1 + (bytes / l2_resident_bytes)^l2_resident_sharpness)

of the bytes is read at ``l2_resident_bandwidth_bytes_per_s`` (never below the DRAM's) and the rest at
``bandwidth_bytes_per_s``. Seconds per byte rise with the bytes, so the time never falls as a GEMM
grows. Without the parameters the term is off (older calibrations predict as before).

On the L40S's vLLM tables (96 MB L2, 864 GB/s GDDR6) skinny GEMMs read a median 1.3 TB/s (up to 2.4)
at 8-16 MB and 0.68-0.72 TB/s from 24 MB on; fitted there, about 21 MB resident at 1.8 TB/s over
0.68 TB/s from DRAM. A simulated step reads its weights cold (each layer's after every other layer's
passed through the L2), so the simulator predicts without the term (:func:`cold_l2`,
sim/cost/fitted.py): it is there so that a fit on warm timings finds the DRAM's bandwidth, not a blend.
"""

from __future__ import annotations

from sim.calib.gemm_tiles import L2_PARAMS, l2_on


def memory_bytes(params: dict, nbytes: float) -> float:
    """The bytes that, read at ``bandwidth_bytes_per_s``, take as long as a GEMM moving ``nbytes``
    with the L2 term on (``nbytes`` with it off)."""
    if not l2_on(params) or nbytes <= 0:
        return nbytes
    bw = params["bandwidth_bytes_per_s"]
    hit = 1.0 / (1.0 + (nbytes / params["l2_resident_bytes"]) ** params["l2_resident_sharpness"])
    return nbytes * (hit * bw / max(params["l2_resident_bandwidth_bytes_per_s"], bw) + 1.0 - hit)


def cold_l2(params: dict) -> dict:
    """``params`` without the L2-residency term: a model's step reads each layer's weights cold."""
    return {k: v for k, v in params.items() if k not in L2_PARAMS}

"""``validation.json``'s ``tier_transfers``: the simulator's CPU-tier transfer times against the
real copies (realengine/tier_copy.py) of a lockstep run with ``kv.offload`` (#43).

Per direction (``load``: host to device, one sample per load; ``store``: device to host, one per
batch of blocks stored): how many, their blocks and bytes, the relative error of each
(predicted / measured - 1) as MAPE, bias and median, the totals, and the copy rate achieved
(bytes / measured seconds) next to the one the simulator assumed.
"""

from __future__ import annotations

import numpy as np


def transfer_errors(samples, bandwidth_bytes_per_s: float, latency_s: float) -> dict:
    out: dict = {"assumed_bandwidth_bytes_per_s": bandwidth_bytes_per_s, "assumed_latency_s": latency_s}
    for direction in ("load", "store"):
        mine = [s for s in samples if s.direction == direction and s.measured_s > 0]
        if not mine:
            out[direction] = {"count": 0}
            continue
        pred = np.array([s.predicted_s for s in mine])
        meas = np.array([s.measured_s for s in mine])
        nbytes = np.array([s.bytes for s in mine], dtype=float)
        rel = pred / meas - 1.0
        big = nbytes >= np.median(nbytes)
        out[direction] = {
            "count": len(mine), "blocks": int(sum(s.blocks for s in mine)), "bytes": int(nbytes.sum()),
            "mape": float(np.mean(np.abs(rel))), "bias": float(np.mean(rel)),
            "median_abs_error": float(np.median(np.abs(rel))),
            "mape_larger_half": float(np.mean(np.abs(rel[big]))),  # the transfers of at least the median size
            "total_predicted_s": float(pred.sum()), "total_measured_s": float(meas.sum()),
            "total_rel_error": float(pred.sum() / meas.sum() - 1.0),
            "achieved_bytes_per_s": float(nbytes.sum() / meas.sum()),
        }
    return out

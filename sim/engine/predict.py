"""What the cost model predicts for one scheduled batch: its compute time and its swaps'
transfer time. The one place where a scheduler's output meets the cost model.
"""

from __future__ import annotations

import dataclasses

from sim.cost.datasheet import staging_time_s, step_time_s, swap_time_s
from sim.sched.output import SchedulerOutput


def predicted_step_s(cost, out: SchedulerOutput, idle_before_s: float = 0.0) -> float:
    """The cost model's time for one scheduled batch (compute only, swaps apart), started
    ``idle_before_s`` after the engine's previous step."""
    return step_time_s(
        cost, num_seqs=out.num_seqs,
        num_prefill_tokens=out.num_prefill_tokens + out.prefill_padding_tokens,
        num_decode_tokens=out.num_decode_tokens + out.decode_padding_seqs,
        decode_kv_tokens=out.decode_kv_tokens, prefill_attn_pairs=out.prefill_attn_pairs,
        prefill_kv_tokens=out.prefill_kv_tokens,
        num_prefill_seqs=out.num_seqs - out.num_decode_tokens - out.decode_padding_seqs,
        idle_before_s=idle_before_s)


def predicted_transfer_s(cost, out: SchedulerOutput) -> float:
    """The cost model's time for a batch's swaps: the PCIe copies, plus the device-side
    packing of gathered swaps (sim.kv.swap.SwapTransfer)."""
    return (swap_time_s(cost, out.swap_out_bytes + out.swap_in_bytes, out.swap_copies)
            + staging_time_s(cost, out.swap_staged_bytes, out.swap_staging_launches))


def kernel_sum_cost(cost):
    """``cost`` without its calibration's composition (sim.calib.composition), or None if it has none."""
    if cost.fitted is None or cost.fitted.composition is None:
        return None
    return dataclasses.replace(cost, fitted=dataclasses.replace(cost.fitted, composition=None))


def after_idle_replay_s(cost) -> float:
    """How long the calibration slept before timing its after-idle steps (0 without a composition)."""
    comp = cost.fitted.composition if cost.fitted is not None else None
    return comp.idle_s if comp is not None else 0.0

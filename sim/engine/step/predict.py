"""What the cost model predicts for one scheduled batch: its compute time and its swaps'
transfer time. The one place where a scheduler's output meets the cost model.
"""

from __future__ import annotations

from sim.cost.base import CostModel
from sim.sched.output import SchedulerOutput


def predicted_step_s(cost: CostModel, out: SchedulerOutput, idle_before_s: float = 0.0) -> float:
    """The cost model's time for one scheduled batch (compute only, swaps apart), started
    ``idle_before_s`` after the engine's previous step."""
    return cost.step_time_s(out.batch_shape(), idle_before_s)


def predicted_transfer_s(cost: CostModel, out: SchedulerOutput) -> float:
    """The cost model's time for a batch's swaps: the PCIe copies, plus the device-side
    packing of gathered swaps (sim.kv.swap.SwapTransfer)."""
    return (cost.swap_time_s(out.swap_out_bytes + out.swap_in_bytes, out.swap_copies)
            + cost.staging_time_s(out.swap_staged_bytes, out.swap_staging_launches))


def kernel_sum_cost(cost: CostModel) -> CostModel | None:
    """``cost`` without its calibration's composition (sim.calib.composition), or None if it has none."""
    return None if cost.composition is None else cost.without_composition()


def after_idle_replay_s(cost: CostModel) -> float:
    """How long the calibration slept before timing its after-idle steps (0 without a composition)."""
    comp = cost.composition
    return comp.idle_s if comp is not None else 0.0

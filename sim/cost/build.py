"""Choosing a run's cost model: the fitted kernel models where the calibration has them,
else the datasheet roofline."""

from __future__ import annotations

from sim.calib.calibration import Calibration
from sim.cost.base import CostModel
from sim.cost.datasheet import build_datasheet_cost
from sim.cost.fitted import build_fitted_cost
from sim.model.spec import KVDtype, ModelSpec


def build_cost_model(model: ModelSpec, calibration: Calibration, kv_dtype: KVDtype | str = KVDtype.BF16,
                     weight_dtype_bytes: float = 2, *, quant_group_size: int = 64) -> CostModel:
    """The cost model of ``model`` on ``calibration`` (activations are in the weight dtype):
    a ``FittedCost`` when the calibration has a fitted ``gemm``, else a ``DatasheetCost``."""
    build = build_fitted_cost if "gemm" in calibration.kernels else build_datasheet_cost
    return build(model, calibration, kv_dtype, weight_dtype_bytes, quant_group_size=quant_group_size)

"""Choosing a run's cost model: the fitted kernel models where the calibration has them,
else the datasheet roofline."""

from __future__ import annotations

from sim.calib.calibration import Calibration
from sim.cost.base import CostModel
from sim.cost.datasheet import build_datasheet_cost
from sim.cost.fitted import build_fitted_cost
from sim.model.spec import KVDtype, ModelSpec


def build_cost_model(model: ModelSpec, calibration: Calibration, kv_dtype: KVDtype | str = KVDtype.BF16,
                     weight_dtype_bytes: float = 2, *, quant_group_size: int = 64,
                     weight_dtype: str | None = None, compute_dtype: str | None = None) -> CostModel:
    """The cost model of ``model`` on ``calibration`` (activations are in the weight dtype):
    a ``FittedCost`` when the calibration has a fitted ``gemm``, else a ``DatasheetCost``.

    ``weight_dtype`` names the weights' element type (fp8 and int8 are both one byte);
    ``compute_dtype`` the GEMMs' math mode (None: the weight dtype's own)."""
    build = build_fitted_cost if "gemm" in calibration.kernels else build_datasheet_cost
    return build(model, calibration, kv_dtype, weight_dtype_bytes, quant_group_size=quant_group_size,
                 weight_dtype=weight_dtype, compute_dtype=compute_dtype)

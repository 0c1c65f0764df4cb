"""The cost model's interface: a batch shape in, seconds out.

Two models implement it: ``DatasheetCost`` (sim/cost/datasheet.py, a roofline over a GPU's
datasheet numbers) and ``FittedCost`` (sim/cost/fitted.py, the calibration's fitted kernel
models and their composition). ``build_cost_model`` (sim/cost/build.py) picks one per run.
``prefill_time_s`` and ``decode_step_time_s`` are shorthands over any of them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from sim.calib.composition import Composition
from sim.cost.shape import BatchShape
from sim.model.dtypes import KVDtype


@runtime_checkable
class CostModel(Protocol):
    """Seconds for what an engine step does on one (model, calibration, dtypes)."""

    model_name: str
    calibration_name: str
    kv_dtype: KVDtype

    @property
    def composition(self) -> Composition | None:
        """The calibration's kernel-sum -> measured-step correction (None: none applied)."""

    def step_time_s(self, shape: BatchShape, idle_before_s: float = 0.0) -> float:
        """Seconds one engine step of ``shape`` takes; 0.0 when it has no tokens.

        ``idle_before_s``: how long the engine sat idle before the step (a composition's
        after-idle factor). Non-decreasing in each field of ``shape``, not necessarily in
        ``idle_before_s`` (an after-idle factor may be below 1).
        """

    def swap_time_s(self, num_bytes: float, num_copies: int = 1) -> float:
        """Seconds to copy ``num_bytes`` between host (pinned) and device memory, in
        ``num_copies`` separate copies of equal size; 0.0 for no bytes."""

    def staging_time_s(self, num_bytes: float, num_launches: int = 1) -> float:
        """Seconds to pack (or unpack) ``num_bytes`` of KV blocks on the device in
        ``num_launches`` gather/scatter kernels; 0.0 for no bytes."""

    def without_composition(self) -> CostModel:
        """This model without its composition: the plain kernel sum (itself if it has none)."""


def prefill_time_s(cm: CostModel, num_prompt_tokens: int, *, num_cached_tokens: int = 0) -> float:
    """One request's prefill alone, in one step (no chunking), after ``num_cached_tokens`` hits."""
    q = num_prompt_tokens - num_cached_tokens
    if q <= 0:
        return 0.0
    return cm.step_time_s(BatchShape.prefill(q, num_cached_tokens))


def decode_step_time_s(cm: CostModel, *, batch_size: int, context_tokens: int) -> float:
    """A pure decode step of ``batch_size`` sequences, each attending to ``context_tokens``."""
    return cm.step_time_s(BatchShape.decode(batch_size, context_tokens))

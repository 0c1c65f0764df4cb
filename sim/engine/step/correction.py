"""An online correction of the cost model's step times (``sim run --validate-every N --correct``).

While a run validates itself against the real kernels (validation/inrun.py), each sampled
step gives a ratio measured / predicted. :class:`StepCorrection` keeps one factor per step
kind (prefill, decode, mixed): an exponentially weighted moving average of those ratios,
bounded to ``[low, high]``, starting at 1. :class:`CorrectedRunner` is the simulation's
runner with every batch's compute time multiplied by its kind's factor as it stands when
the batch runs (a sample updates the factor before its own step's time is taken). Swap
transfers are not rescaled: the in-run samples time the forward only.

Pure Python: the simulator never imports the real engine; the validator calls ``update``.
"""

from __future__ import annotations

from sim.engine.step.engine_step import PredictedRunner
from sim.sched.output import SchedulerOutput

KINDS = ("prefill", "decode", "mixed")


def step_kind(num_prefill_tokens: int, num_decode_tokens: int) -> str:
    """prefill, decode or mixed: the kinds ``sim validate`` reports errors by."""
    if num_prefill_tokens and num_decode_tokens:
        return "mixed"
    return "prefill" if num_prefill_tokens else "decode"


class StepCorrection:
    """Per-kind factors: ``f <- (1 - alpha) f + alpha * ratio``, then clamped to [low, high]
    (the ratio is clamped first, so one wild sample moves the factor by a bounded step)."""

    def __init__(self, alpha: float = 0.3, low: float = 0.5, high: float = 2.0) -> None:
        if not 0 < alpha <= 1 or not 0 < low <= 1 <= high:
            raise ValueError(f"need 0 < alpha <= 1 and 0 < low <= 1 <= high; got {alpha}, {low}, {high}")
        self.alpha, self.low, self.high = alpha, low, high
        self.factors = dict.fromkeys(KINDS, 1.0)
        self.history: list[tuple[float, str, float]] = []  # (simulated time, kind, factor after the update)

    def _clamp(self, x: float) -> float:
        return min(self.high, max(self.low, x))

    def update(self, kind: str, ratio: float, now_s: float) -> float:
        """Fold one sample's measured / predicted ``ratio`` into ``kind``'s factor; the new factor."""
        f = self._clamp((1 - self.alpha) * self.factors[kind] + self.alpha * self._clamp(ratio))
        self.factors[kind] = f
        self.history.append((now_s, kind, f))
        return f

    def factor(self, out: SchedulerOutput) -> float:
        return self.factors[step_kind(out.num_prefill_tokens, out.num_decode_tokens)]


class CorrectedRunner(PredictedRunner):
    """The cost model's runner with each batch's compute time times its kind's factor."""

    def __init__(self, cost, correction: StepCorrection) -> None:
        super().__init__(cost)
        self.correction = correction

    def compute_s(self, out: SchedulerOutput, idle_before_s: float) -> float:
        return super().compute_s(out, idle_before_s) * self.correction.factor(out)

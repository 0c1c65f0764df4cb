"""Token-level KV eviction: how much of a sequence's KV it keeps.

A per-request budget for long contexts. Of a sequence's ``T`` computed tokens it keeps:

* ``none``: all ``T``;
* ``sliding-window``: the last ``W`` (models with a native window, such as Mistral, use
  this automatically with their window);
* ``streaming`` (StreamingLLM): the first ``S`` attention-sink tokens plus the last ``W``;
* ``h2o-budget`` (H2O): ``H`` "heavy hitter" tokens plus the last ``W``. Which tokens are
  heavy is not simulated; the memory and bandwidth effect is: ``min(T, H + W)`` tokens,
  compacted into ``ceil(kept / block_size)`` blocks.

Memory per request becomes bounded, and attention reads fewer KV bytes: a query at
position ``p`` attends to ``min(p + 1, K)`` keys, ``K`` the budget. Quality is not
simulated: the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class TokenEviction(StrEnum):
    NONE = "none"
    SLIDING_WINDOW = "sliding-window"
    STREAMING = "streaming"
    H2O_BUDGET = "h2o-budget"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TokenBudget:
    policy: TokenEviction = TokenEviction.NONE
    window_tokens: int = 0
    sink_tokens: int = 0
    heavy_tokens: int = 0
    # The most tokens a sequence keeps (None: unbounded). Derived, set once: read every step.
    max_tokens: int | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cap = None if self.policy == TokenEviction.NONE else (
            self.window_tokens + self.sink_tokens + self.heavy_tokens)
        object.__setattr__(self, "max_tokens", cap)  # frozen: set once here

    def kept_tokens(self, num_tokens: int) -> int:
        cap = self.max_tokens
        return num_tokens if cap is None or num_tokens < cap else cap

    def attended_pairs(self, num_cached: int, num_new: int) -> float:
        """Sum over the new tokens' positions p of min(p + 1, K): causal, budgeted."""
        a, b = num_cached + 1, num_cached + num_new  # the p + 1 range
        cap = self.max_tokens
        if cap is None or b <= cap:
            return num_new * (a + b) / 2
        if a > cap:
            return float(num_new * cap)
        return (a + cap) * (cap - a + 1) / 2 + (b - cap) * cap

    def num_blocks(self, num_tokens: int, block_size: int) -> int:
        """Blocks a sequence of ``num_tokens`` computed tokens holds."""
        T, B = num_tokens, block_size
        if self.policy == TokenEviction.NONE or T <= self.max_tokens:
            return _cdiv(T, B)
        if self.policy == TokenEviction.H2O_BUDGET:
            return _cdiv(self.max_tokens, B)
        sink_blocks = _cdiv(self.sink_tokens, B)
        first_window_block = max((T - self.window_tokens) // B, sink_blocks)
        return sink_blocks + _cdiv(T, B) - first_window_block

    def first_droppable_block(self, block_size: int) -> int:
        """Index (in a request's block list) of the oldest block that may be dropped."""
        if self.policy == TokenEviction.STREAMING:
            return _cdiv(self.sink_tokens, block_size)
        return 0

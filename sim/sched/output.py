"""What one engine step does: which requests run with how many tokens, and what moved."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.cost.shape import BatchShape
from sim.kv.token_budget import TokenBudget
from sim.request import Request


def is_decode(req: Request, num_new_tokens: int) -> bool:
    """Is this scheduled work a decode: the one token sampled last step, all else cached?"""
    return num_new_tokens == 1 and req.num_generated > 0 and req.num_computed_tokens == req.num_tokens - 1


@dataclass
class SchedulerOutput:
    """The batch of one step plus the aggregates the cost model needs.

    ``scheduled`` pairs a request with its number of new tokens this step. A *decode*
    computes the one token sampled last step; anything else is a *prefill* (a whole prompt,
    a chunk of one, or a recomputation after preemption).
    """

    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    prefill_padding_tokens: int = 0  # static batching: prompts padded to the longest
    decode_padding_seqs: int = 0  # static batching: finished members still decoded
    decode_kv_tokens: int = 0  # KV tokens read by decode attention (context incl. new)
    prefill_attn_pairs: float = 0.0  # query-key pairs of prefill attention
    prefill_kv_tokens: int = 0  # KV tokens read by prefill attention
    preempted: list[Request] = field(default_factory=list)
    swapped_out: list[Request] = field(default_factory=list)
    swapped_in: list[Request] = field(default_factory=list)
    swap_out_bytes: int = 0
    swap_in_bytes: int = 0
    swap_copies: int = 0  # separate host<->device copies (per block or per gathered buffer, per layer, K and V)
    swap_staged_bytes: int = 0  # gathered swaps: bytes packed/unpacked on the device around the copies
    swap_staging_launches: int = 0  # gathered swaps: gather/scatter kernel launches
    rejected: list[Request] = field(default_factory=list)
    # (request, prefix-cache hit tokens) of each request admitted from ``waiting`` (new or back
    # after a recompute preemption), in order: schedule.jsonl's ``hits``
    admitted: list[tuple[Request, int]] = field(default_factory=list)
    # finished requests whose seats and blocks this schedule freed at its end (async
    # scheduling's lag, sim/sched/base.py ``finish_lag``): a step that ran nothing may retry
    num_released: int = 0
    #: a CPU tier's loads started this step (sim/kv/offload.py): (request, blocks), each run on the host link
    tier_loads: list[tuple[Request, int]] = field(default_factory=list)
    # Block ids each swapped-out request held (a real engine copies them out first).
    swapped_out_blocks: dict[int, list[int]] = field(default_factory=dict)
    # Token-level KV eviction bounds what attention reads (kept tokens only).
    budget: TokenBudget = field(default_factory=TokenBudget)

    def __post_init__(self) -> None:
        self._cap = self.budget.max_tokens

    def add(self, req: Request, num_new_tokens: int) -> None:
        self.scheduled.append((req, num_new_tokens))
        cached = req.num_computed_tokens
        cap = self._cap
        if is_decode(req, num_new_tokens):  # (running decodes skip add: ContinuousScheduler)
            self.num_decode_tokens += 1
            self.decode_kv_tokens += cached + 1 if cap is None or cached < cap else cap
        else:
            self.num_prefill_tokens += num_new_tokens
            total = cached + num_new_tokens
            if cap is None:
                self.prefill_attn_pairs += num_new_tokens * (cached + (num_new_tokens + 1) / 2)
                self.prefill_kv_tokens += total
            else:
                self.prefill_attn_pairs += self.budget.attended_pairs(cached, num_new_tokens)
                self.prefill_kv_tokens += min(total, cap)

    def add_padding(self, context_tokens: int) -> None:
        """A finished member of a static batch still occupies a decode row."""
        self.decode_padding_seqs += 1
        self.decode_kv_tokens += self.budget.kept_tokens(context_tokens)

    @property
    def num_seqs(self) -> int:
        return len(self.scheduled) + self.decode_padding_seqs

    @property
    def num_tokens(self) -> int:
        return (self.num_prefill_tokens + self.num_decode_tokens
                + self.prefill_padding_tokens + self.decode_padding_seqs)

    def batch_shape(self) -> BatchShape:
        """What the cost model charges for this step: the scheduled work plus static
        batching's padding (padded prompt tokens, finished members' decode rows)."""
        num_seqs = self.num_seqs
        return BatchShape(
            num_seqs=num_seqs,
            num_prefill_tokens=self.num_prefill_tokens + self.prefill_padding_tokens,
            num_decode_tokens=self.num_decode_tokens + self.decode_padding_seqs,
            decode_kv_tokens=self.decode_kv_tokens, prefill_attn_pairs=self.prefill_attn_pairs,
            prefill_kv_tokens=self.prefill_kv_tokens,
            num_prefill_seqs=num_seqs - self.num_decode_tokens - self.decode_padding_seqs)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.swapped_out and not self.rejected

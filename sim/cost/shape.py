"""The shape of one engine step: what the cost model needs to know about a batch.

A plain value: the scheduler builds one per step (``SchedulerOutput.batch_shape``) and the
cost model turns it into seconds. Imports nothing from the rest of kvsim.
"""

from __future__ import annotations

from typing import NamedTuple


class BatchShape(NamedTuple):
    """One step's batch, summed over its sequences. All fields are non-negative.

    Immutable (a named tuple: built once per simulated step, so it must be cheap to make).

    num_seqs: sequences that produce a token this step (lm_head rows).
    num_prefill_tokens / num_decode_tokens: tokens computed, summed over sequences.
    decode_kv_tokens: sum over decoding sequences of the KV tokens each attends to.
    prefill_attn_pairs: sum over prefill chunks of q x (cached + (q + 1) / 2), where q is
        the chunk's tokens and cached the KV tokens already there (causal attention).
    prefill_kv_tokens: sum over prefill chunks of cached + q (KV tokens read).
    num_prefill_seqs: prefill chunks in the step (a fitted attention's per-sequence cost).
    """

    num_seqs: int
    num_prefill_tokens: int
    num_decode_tokens: int
    decode_kv_tokens: int
    prefill_attn_pairs: float
    prefill_kv_tokens: int
    num_prefill_seqs: int = 1

    @property
    def num_tokens(self) -> int:
        """Tokens computed in the step, prefill and decode."""
        return self.num_prefill_tokens + self.num_decode_tokens

    @classmethod
    def prefill(cls, num_new_tokens: int, num_cached_tokens: int = 0) -> BatchShape:
        """One sequence's prefill chunk of ``num_new_tokens`` after ``num_cached_tokens`` cached, alone."""
        q, c = num_new_tokens, num_cached_tokens
        return cls(num_seqs=1, num_prefill_tokens=q, num_decode_tokens=0, decode_kv_tokens=0,
                   prefill_attn_pairs=q * (c + (q + 1) / 2), prefill_kv_tokens=c + q)

    @classmethod
    def decode(cls, batch_size: int, context_tokens: int) -> BatchShape:
        """A pure decode step of ``batch_size`` sequences, each attending to ``context_tokens``."""
        return cls(num_seqs=batch_size, num_prefill_tokens=0, num_decode_tokens=batch_size,
                   decode_kv_tokens=batch_size * context_tokens, prefill_attn_pairs=0,
                   prefill_kv_tokens=0, num_prefill_seqs=0)

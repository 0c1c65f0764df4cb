"""A request's state as the scheduler and allocators see it.

Token bookkeeping follows vLLM v1: a request *knows* ``num_tokens = num_prompt_tokens +
num_generated`` tokens, of which the first ``num_computed_tokens`` have KV in the cache.
Invariant while unfinished: ``num_computed_tokens < num_tokens``. A step that computes the
last known token samples one more (``num_generated += 1``); a step that computes only part
of the known tokens (a prefill chunk) samples nothing. Recompute preemption sets
``num_computed_tokens`` back to 0: the prompt *and* the tokens generated so far are
prefilled again.

Token *content* matters only to the prefix cache, so it is kept symbolically: a request's
tokens are a sequence of segments ``(segment_id, length)``; two requests share a prefix
exactly when their segment sequences agree on it. The request's own output is segment
``-(request_id + 1)``.

The run's requests also say which tokens are their own (``own_from``): from that token on
(the turn's new user tokens and its answer), no other request holds the same segments until
this one has finished, and none ever does when no later turn repeats them (``followed``
False). The paged allocator then hashes those blocks only when the request is freed
(sim/kv/paged.py). A request made without them (tests, prefill copies) claims nothing.
"""

from __future__ import annotations

from enum import Enum


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"
    REJECTED = "rejected"


class Request:
    """One request (one conversation turn). Plain object: the hot loop touches it often."""

    __slots__ = (
        "request_id", "arrival_s", "prompt_segments", "num_prompt_tokens", "max_tokens",
        "num_output_tokens", "session", "turn", "status", "num_computed_tokens",
        "num_generated", "admitted_s", "first_token_s", "last_token_s", "finish_s", "num_preemptions",
        "num_swaps", "num_cached_tokens", "reject_reason", "block_hashes", "admit_seq",
        "prefix_len", "slot_room", "client_first_s", "client_last_s", "own_from", "followed", "token_s",
    )

    def __init__(
        self,
        request_id: int,
        arrival_s: float,
        prompt_segments: tuple[tuple[int, int], ...],
        max_tokens: int,
        num_output_tokens: int,
        session=None,
        turn: int = 0,
    ) -> None:
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.prompt_segments = prompt_segments
        self.num_prompt_tokens = sum([n for _, n in prompt_segments])
        self.max_tokens = max_tokens  # what the client allowed: allocators may reserve it
        self.num_output_tokens = num_output_tokens  # the true length: hidden from policies
        self.session = session
        self.turn = turn
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_generated = 0
        self.admitted_s: float | None = None
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None  # when the last token was generated
        self.finish_s: float | None = None  # when the answer was returned (static: batch end)
        self.num_preemptions = 0
        self.num_swaps = 0
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache, first admission
        self.reject_reason: str | None = None
        self.block_hashes: list[int] = []  # chained hashes of full blocks, filled lazily
        self.admit_seq = -1  # order of the latest admission: the recompute victim is the max
        self.prefix_len = 0  # shared-system-prompt tokens (for reporting)
        # When the client received the first and the last token through a modelled front end
        # (sim/engine/step/frontend.py); None without one (the client sees the engine's times).
        self.client_first_s: float | None = None
        self.client_last_s: float | None = None
        # When its latest token was delivered (the client's time as client_first_s; the ITL
        # log's, sim/engine/logs/itl.py, stamped as the token goes out); None before the first.
        self.token_s: float | None = None
        # Set by the paged allocator: while ``num_computed_tokens + num_new_tokens <=
        # slot_room``, ``allocate_slots`` (no cached tokens, no watermark) would change
        # nothing and succeed, so the scheduler skips the call. 0 when it holds nothing.
        self.slot_room = 0
        # Set by the session driver (sim/engine/parts.py): the first token of the request's own
        # segments, and whether a later turn repeats them. None: every token may be shared.
        self.own_from: int | None = None
        self.followed = True

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_generated

    @property
    def final_num_tokens(self) -> int:
        """Tokens the request will hold when done (known to metrics, never to policies)."""
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def output_segment(self) -> int:
        return -(self.request_id + 1)

    def segments(self) -> tuple[tuple[int, int], ...]:
        """All known tokens as segments: the prompt, then the output so far."""
        if self.num_generated == 0:
            return self.prompt_segments
        return self.prompt_segments + ((self.output_segment, self.num_generated),)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id}, {self.status.value}, computed={self.num_computed_tokens}"
            f"/{self.num_tokens}, generated={self.num_generated}/{self.num_output_tokens})"
        )

"""The scenario's ``workload`` section: length distributions, traces, shared prefixes,
conversations. Re-exported by sim/config/schema.py; each key's description is its text on
docs/reference/scenario.md (generated from these models)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from sim.config.arrival_schema import ArrivalProcess, ClosedArrival, OfflineArrival
from sim.config.limits import FrozenModel as _Frozen, nonneg_float, pos_float, pos_int


class _Clip(_Frozen):
    min: pos_int("<length>.min") = Field(1, description="Shorter draws are raised to this.")
    max: pos_int("<length>.max") | None = Field(None, description="Longer draws are cut to this (unset: no cap).")

    @model_validator(mode="after")
    def _min_le_max(self):
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class FixedLength(_Clip):
    """Every draw the same length."""

    type: Literal["fixed"]
    value: pos_int("<length>.value") = Field(description="The length, in tokens.")


class UniformLength(_Clip):
    """Uniform on the integers [low, high]."""

    type: Literal["uniform"]
    low: pos_int("<length>.low") = Field(description="Shortest length (at most `high`).")
    high: pos_int("<length>.high") = Field(description="Longest length.")

    @model_validator(mode="after")
    def _low_le_high(self):
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must be <= high ({self.high})")
        return self


class LogNormalLength(_Clip):
    """Lognormal: a long right tail, as chat prompts and answers have."""

    type: Literal["lognormal"]
    median: pos_float("<length>.median") = Field(description="Median length, in tokens.")
    sigma: pos_float("<length>.sigma") = Field(description="Standard deviation of the length's logarithm.")


class ZipfLength(_Clip):
    """P(k) proportional to k^-a on the integers [min, max]; max is required."""

    type: Literal["zipf"]
    a: pos_float("<length>.a") = Field(description="The exponent: P(k) proportional to k^-a.")
    max: pos_int("<zipf>.max") = Field(description="Longest length (required: the support is held in memory).")


class EmpiricalLength(_Clip):
    """Sampled with replacement from one column of a CSV file (e.g. a trace)."""

    type: Literal["empirical"]
    path: str = Field(description="A CSV file (relative to the scenario's folder), e.g. a trace.")
    column: str = Field(description="The column to sample, e.g. `num_decode_tokens`.")


LengthDist = Annotated[
    Union[FixedLength, UniformLength, LogNormalLength, ZipfLength, EmpiricalLength],
    Field(discriminator="type"),
]


class TraceReplay(_Frozen):
    """Arrival times and lengths from a CSV with columns
    ``arrived_at, num_prefill_tokens, num_decode_tokens`` (the Azure 2023 format), and
    optionally a prefix identity, ``prefix_group, prefix_tokens``: rows of the same group (> 0)
    share the first ``prefix_tokens`` tokens of their prompts (as far as both have them; fewer
    than ``num_prefill_tokens``), so prefix caching finds them: a shared system prompt is one
    group; a conversation is one group whose turns give ``prefix_tokens`` = their prompt less
    the new message. Or a tree of prompts, ``prefix_parent, prefix_tokens``: the row's prompt
    begins with the first ``prefix_tokens`` tokens of data row ``prefix_parent``'s (1 is the
    first data row; an earlier row; 0: none), as ``sim serve --out`` writes its arrivals.csv.
    Without the columns no two requests share a prefix."""

    path: str = Field(description="The CSV file (relative to the scenario's folder).")
    speedup: pos_float("workload.trace.speedup") = Field(
        1.0, description="Divides every arrival time: 2.0 replays the trace twice as fast.")


class SharedPrefix(_Frozen):
    """``num_prefixes`` system prompts of ``prefix_tokens`` tokens; a share
    ``fraction`` of sessions starts with one of them, picked uniformly, or with Zipf
    popularity (prompt k with probability proportional to k^-zipf_a) when ``zipf_a``
    is set."""

    num_prefixes: pos_int("workload.shared_prefix.num_prefixes") = Field(
        description="How many distinct system prompts.")
    prefix_tokens: pos_int("workload.shared_prefix.prefix_tokens") = Field(
        description="Tokens in each system prompt (shorter than `engine.max_model_len`).")
    fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        1.0, description="Share of sessions that start with one of them.")
    zipf_a: pos_float("workload.shared_prefix.zipf_a") | None = Field(
        None, description="Zipf popularity: prompt k picked with probability proportional to k^-zipf_a "
                          "(unset: uniformly).")


class Conversation(_Frozen):
    """Multi-turn sessions: turn k's prompt is the whole history (previous prompts and
    answers) plus new user tokens drawn from ``workload.prompt_tokens``; the next turn
    arrives ``think_time_s`` (exponential with this mean) after the previous answer."""

    turns: LengthDist = Field(description="Turns per session, a length distribution.")
    think_time_s: nonneg_float("workload.conversation.think_time_s") = Field(
        5.0, description="Mean of the exponential wait between an answer and the next turn, in seconds.")


class Workload(_Frozen):
    """The requests: when sessions arrive (``arrival``, or a ``trace``) and how long their
    prompts and answers are. Give ``num_requests``, ``duration_s`` or both."""

    num_requests: pos_int("workload.num_requests") | None = Field(
        None, description="Number of arrivals (sessions); with `duration_s` too, whichever ends first.")
    duration_s: pos_float("workload.duration_s") | None = Field(
        None, description="Arrivals stop at this time, in seconds; the run then drains.")
    arrival: ArrivalProcess | None = Field(
        None, description="When sessions arrive (required unless `trace`).")
    trace: TraceReplay | None = Field(
        None, description="Replay arrivals and lengths from a CSV instead of `arrival` and the lengths.")
    prompt_tokens: LengthDist | None = Field(
        None, description="Prompt lengths (required unless `trace`); in a conversation, each turn's new tokens.")
    output_tokens: LengthDist | None = Field(
        None, description="Answer lengths (required unless `trace`).")
    max_tokens: pos_int("workload.max_tokens") | None = Field(
        None, description="The clients' `max_tokens`: outputs are clipped to it and to `max_model_len` - prompt. "
                          "A `trtllm` engine reserves it (else all of `max_model_len` the prompt leaves) "
                          "for every request, so set it to what your clients send.")
    ignore_eos: bool = Field(
        False, description="The clients ask for each request's output length as its `max_tokens` and ignore EOS "
                           "(bench_serving's default): an `sglang` engine with prefix caching off then admits by "
                           "SGLang 0.4's rule for such requests (never preempting).")
    shared_prefix: SharedPrefix | None = Field(
        None, description="System prompts shared by groups of sessions (unset: none).")
    conversation: Conversation | None = Field(
        None, description="Multi-turn sessions (unset: one request a session).")

    @model_validator(mode="after")
    def _one_source(self):
        if self.trace is not None:
            for key in ("arrival", "prompt_tokens", "output_tokens", "conversation"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' cannot be combined with 'trace' (the trace gives it)")
        else:
            for key in ("arrival", "prompt_tokens", "output_tokens"):
                if getattr(self, key) is None:
                    raise ValueError(f"'{key}' is required unless 'trace' is given")
            if self.num_requests is None and self.duration_s is None:
                raise ValueError("give 'num_requests' or 'duration_s' (or both)")
            if isinstance(self.arrival, OfflineArrival) and self.num_requests is None:
                raise ValueError("an offline arrival (every request at t = 0) needs 'num_requests'")
            if isinstance(self.arrival, ClosedArrival) and (self.num_requests is None or self.duration_s is not None
                                                            or self.conversation is not None):
                raise ValueError("a closed arrival (clients that each send their next request after an answer) "
                                 "needs 'num_requests', and takes neither 'duration_s' nor 'conversation'")
        return self

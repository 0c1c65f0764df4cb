"""Workloads: when requests arrive, how long they are, and what they share.

Everything is drawn up front from the run's one ``numpy.random.Generator`` (so a seed fixes
the whole workload, whatever the policies do later), except the arrival *times* of
follow-up conversation turns, which depend on when the previous answer finished: their
think times are drawn up front, the engine adds them to the finish time.

A workload is a list of :class:`SessionSpec`: a single request is a session of one turn.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from sim.errors import ConfigError
from sim.config.limits import MAX_REQUESTS, MAX_SESSIONS, MAX_TOKENS
from sim.config.scenario import (
    MAX_TURNS, ClosedArrival, ConstantArrival, EmpiricalLength, FixedLength, GammaArrival, LogNormalLength,
    OfflineArrival,
    PoissonArrival, Scenario, UniformLength, ZipfLength)
from sim.views import IndexedSequence
from sim.workload.csvfile import read_columns
from sim.workload.trace import PREFIX_COLUMNS, parent_chains, read_trace  # noqa: F401 (PREFIX_COLUMNS: re-exported)


@dataclass(frozen=True)
class TurnSpec:
    user_tokens: int  # new prompt tokens of this turn (the history comes on top)
    output_tokens: int  # the true answer length (before max_tokens clipping)
    think_time_s: float  # pause before this turn, after the previous answer (0 for turn 0)


@dataclass(frozen=True)
class SessionSpec:
    session_id: int
    arrival_s: float
    prefix: tuple[int, int] | None  # (segment_id, tokens) of a shared system prompt
    turns: tuple[TurnSpec, ...]
    first_segment: int  # segment id of turn 0's user tokens; turn k uses first_segment + k
    history: bool = True  # a turn's prompt carries the earlier turns (False: a closed-loop client's requests)
    #: a trace with prefix_parent rows: the prompt's shared segments (maybe none); a later row may
    #: repeat any of its tokens, so it claims none as its own (sim/request.py's own_from)
    prefix_chain: tuple | None = None


# ----------------------------------------------------------------------------- lengths


def read_column(path: str, column: str) -> np.ndarray:
    """One numeric column of a CSV file (sim/workload/csvfile.py: bounded, checked, cached)."""
    return read_columns(path, (column,)).values[0]


def sample_lengths(dist, n: int, rng: np.random.Generator, sc: Scenario) -> np.ndarray:
    """``n`` integer lengths from a length distribution, clipped to [min, max]."""
    if isinstance(dist, FixedLength):
        raw = np.full(n, dist.value, dtype=float)
    elif isinstance(dist, UniformLength):
        raw = rng.integers(dist.low, dist.high, endpoint=True, size=n).astype(float)
    elif isinstance(dist, LogNormalLength):
        raw = np.rint(rng.lognormal(np.log(dist.median), dist.sigma, size=n))
    elif isinstance(dist, ZipfLength):
        support = np.arange(dist.min, dist.max + 1, dtype=float)
        weights = support ** -dist.a
        raw = rng.choice(support, size=n, p=weights / weights.sum())
    elif isinstance(dist, EmpiricalLength):
        values = read_column(str(sc.resolve(dist.path)), dist.column)
        raw = rng.choice(values, size=n)
    else:  # pragma: no cover - the scenario schema admits nothing else
        raise TypeError(f"unknown length distribution {dist!r}")
    # MAX_TOKENS (above any max_model_len) keeps heavy tails inside int64
    hi = min(dist.max, MAX_TOKENS) if dist.max is not None else MAX_TOKENS
    return np.clip(raw, dist.min, hi).astype(np.int64)


# ---------------------------------------------------------------------------- arrivals


def _inter_arrivals(arrival, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(arrival, OfflineArrival):  # every request at t = 0
        return np.zeros(n)
    mean = 1.0 / arrival.rate
    if isinstance(arrival, PoissonArrival):
        return rng.exponential(mean, size=n)
    if isinstance(arrival, GammaArrival):
        shape = 1.0 / arrival.cv**2  # CV of a gamma is 1/sqrt(shape)
        return rng.gamma(shape, mean / shape, size=n)
    if isinstance(arrival, ConstantArrival):
        return np.full(n, mean)
    raise TypeError(f"unknown arrival process {arrival!r}")  # pragma: no cover


def arrival_times(sc: Scenario, rng: np.random.Generator) -> np.ndarray:
    """Session arrival times: the first at t=0, cut by num_requests and/or duration_s."""
    wl = sc.workload
    chunk = wl.num_requests or int(wl.duration_s * wl.arrival.rate * 1.2) + 64
    pieces, total, start = [], 0, 0.0
    while True:
        gaps = _inter_arrivals(wl.arrival, chunk, rng)
        times = start + np.cumsum(gaps) - gaps  # exclusive running sum: the chunk starts at `start`
        start = float(times[-1] + gaps[-1])
        pieces.append(times)
        total += times.size
        if wl.num_requests is not None and total >= wl.num_requests:
            break
        if wl.duration_s is not None and start >= wl.duration_s:
            break
        if total > MAX_SESSIONS:
            raise ConfigError(sc.source_path, "workload", f"more than {MAX_SESSIONS} sessions")
    times = np.concatenate(pieces)
    if wl.num_requests is not None:
        times = times[: wl.num_requests]
    if wl.duration_s is not None:
        times = times[times < wl.duration_s]
    return times


# ---------------------------------------------------------------------------- sessions


def build_workload(sc: Scenario, rng: np.random.Generator) -> Sessions:
    """All sessions of the run, in arrival order (ties keep generation order), built lazily."""
    wl = sc.workload
    closed = isinstance(wl.arrival, ClosedArrival)
    if wl.trace is not None:
        arrived, prompts, outputs, groups, parents, ptoks = read_trace(sc.resolve(wl.trace.path), wl.trace.speedup)
        if groups is None:
            groups = ptoks = np.zeros(arrived.size, dtype=np.int64)
            parents = groups - 1
        arrived = arrived / wl.trace.speedup
        keep = np.ones(arrived.size, dtype=bool)
        if wl.duration_s is not None:
            keep &= arrived < wl.duration_s
        cols = (arrived, prompts, outputs, groups, parents, ptoks)
        arrived, prompts, outputs, groups, parents, ptoks = (a[keep] for a in cols)  # (parents come earlier)
        if wl.num_requests is not None:
            arrived, prompts, outputs, groups, parents, ptoks = (a[: wl.num_requests] for a in
                                                                 (arrived, prompts, outputs, groups, parents, ptoks))
        turns_per = np.ones(arrived.size, dtype=np.int64)
        if groups.any() or (parents >= 0).any():  # the trace's prefix identity: group g's stream is
            first = int(groups.max(initial=0)) + 1  # segment g (1..), a row's own tokens first + row
            chains = parent_chains(groups, parents, ptoks, prompts, first) if (parents >= 0).any() else None
            starts = np.arange(arrived.size, dtype=np.int64)
            return Sessions(arrived.astype(float), turns_per, starts, prompts - ptoks, outputs, None, groups, ptoks,
                            first, chains=chains)
    elif closed:  # concurrency clients at t = 0, num_requests spread over them
        n = min(wl.arrival.concurrency, wl.num_requests)
        arrived = np.zeros(n)
        turns_per = np.full(n, wl.num_requests // n, dtype=np.int64)
        turns_per[: wl.num_requests % n] += 1
    else:
        arrived = arrival_times(sc, rng)
        n = arrived.size
        turns_per = (
            sample_lengths(wl.conversation.turns, n, rng, sc)
            if wl.conversation is not None else np.ones(n, dtype=np.int64)
        )
    if wl.trace is None:
        total_turns = int(turns_per.sum())
        if closed and int(turns_per.max()) > MAX_TURNS:
            raise ConfigError(sc.source_path, "workload.arrival.concurrency", (
                f"{n} clients send {wl.num_requests} requests, up to {int(turns_per.max())} each; the most is "
                f"{MAX_TURNS} a client: raise the concurrency or lower workload.num_requests"))
        if n and (int(turns_per.max()) > MAX_TURNS or total_turns > MAX_REQUESTS):
            raise ConfigError(sc.source_path, "workload.conversation.turns", (
                f"{n} sessions drew {total_turns} turns, up to {int(turns_per.max())} in one; the "
                f"most are {MAX_TURNS} turns a session and {MAX_REQUESTS} requests a run: set a max"))
        prompts = sample_lengths(wl.prompt_tokens, total_turns, rng, sc)
        outputs = sample_lengths(wl.output_tokens, total_turns, rng, sc)
    n = arrived.size
    think_mean = (wl.conversation.think_time_s if wl.conversation is not None
                  else wl.arrival.think_time_s if closed else 0.0)
    thinks = rng.exponential(think_mean, size=int(turns_per.sum())) if think_mean > 0 else None

    sp = wl.shared_prefix
    if sp is not None:
        uses = rng.random(n) < sp.fraction
        if sp.zipf_a is None:
            which = rng.integers(0, sp.num_prefixes, size=n)
        else:
            weights = np.arange(1, sp.num_prefixes + 1, dtype=float) ** -sp.zipf_a
            which = rng.choice(sp.num_prefixes, size=n, p=weights / weights.sum())
    next_segment = (sp.num_prefixes if sp is not None else 0) + 1  # prefixes are 1..N

    starts = np.concatenate(([0], np.cumsum(turns_per)[:-1])).astype(np.int64) if n else np.zeros(0, np.int64)
    prefix_ids = (np.where(uses, which + 1, 0).astype(np.int64) if sp is not None
                  else np.zeros(n, dtype=np.int64))
    return Sessions(arrived.astype(float), turns_per.astype(np.int64), starts, prompts.astype(np.int64),
                    outputs.astype(np.int64), thinks, prefix_ids, sp.prefix_tokens if sp is not None else 0,
                    next_segment, history=not closed)


_CHUNK = 4096  # sessions read from the arrays at a time


class Sessions(IndexedSequence):
    """The run's sessions in arrival order, each :class:`SessionSpec` built when it is read
    from the arrays the workload was drawn into (a million sessions kept as objects would
    hold about 400 MB; as arrays, about 40 MB). Reading the same index twice gives equal,
    not identical, specs: a run reads each session once, at its arrival."""

    _what = "session"

    def __init__(self, arrived: np.ndarray, turns_per: np.ndarray, starts: np.ndarray, prompts: np.ndarray,
                 outputs: np.ndarray, thinks: np.ndarray | None, prefix_ids: np.ndarray,
                 prefix_tokens: int | np.ndarray, first_segment: int, history: bool = True,
                 chains: list[tuple] | None = None) -> None:
        self._chains = chains  # a trace's prefix_parent rows: each session's prefix segments
        self._history = history  # False: closed-loop clients, whose requests do not carry earlier ones
        self._arrived, self._turns, self._starts = arrived, turns_per, starts
        self._prompts, self._outputs, self._thinks = prompts, outputs, thinks
        self._prefix_ids, self._prefix_tokens, self._first_segment = prefix_ids, prefix_tokens, first_segment

    def __len__(self) -> int:
        return int(self._arrived.size)

    def _item(self, i: int) -> SessionSpec:
        return next(self._chunk(i, i + 1))

    def arrival_s(self, i: int) -> float:
        """When session ``i`` arrives."""
        return float(self._arrived[i])

    def max_turns(self) -> int:
        """The most turns a session has (0 with no sessions)."""
        return int(self._turns.max()) if len(self) else 0

    def __iter__(self) -> Iterator[SessionSpec]:
        for i in range(0, len(self), _CHUNK):
            yield from self._chunk(i, min(i + _CHUNK, len(self)))

    def _chunk(self, i0: int, i1: int) -> Iterator[SessionSpec]:
        """Sessions ``i0`` to ``i1``, read from slices of the arrays as lists (an element of
        a numpy array costs far more to read than one of a list)."""
        arrived, nts = self._arrived[i0:i1].tolist(), self._turns[i0:i1].tolist()
        starts, pids = self._starts[i0:i1].tolist(), self._prefix_ids[i0:i1].tolist()
        k0, k1 = starts[0], starts[-1] + nts[-1]
        prompts, outputs = self._prompts[k0:k1].tolist(), self._outputs[k0:k1].tolist()
        thinks = self._thinks[k0:k1].tolist() if self._thinks is not None else None
        first, prefix_tokens = self._first_segment, self._prefix_tokens
        per = None if isinstance(prefix_tokens, int) else prefix_tokens[i0:i1].tolist()  # a trace's, per session
        for j in range(i1 - i0):
            k = starts[j] - k0
            turns = tuple(TurnSpec(prompts[k + t], outputs[k + t],
                                   thinks[k + t] if (thinks is not None and t > 0) else 0.0)
                          for t in range(nts[j]))
            pid = pids[j]
            yield SessionSpec(i0 + j, arrived[j], (pid, prefix_tokens if per is None else per[j]) if pid else None,
                              turns, first + starts[j], self._history,
                              self._chains[i0 + j] if self._chains is not None else None)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence) or len(self) != len(other):
            return False
        return all(a == b for a, b in zip(self, other))

    __hash__ = None  # mutable-looking sequence: not hashable, like a list

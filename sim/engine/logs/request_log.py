"""Every request of a run, in arrival order, without keeping finished ones as objects.

A run of a million requests cannot keep a million :class:`~sim.request.Request` objects
(about 0.5-1.6 KB each with their prompt segments, session and times). A
:class:`RequestLog` keeps a request as an object while it is in flight; once it has
finished (and the front end has streamed its last token, and its follow-up turn is made)
or has been rejected, :meth:`RequestLog.retire` copies the numbers that the outputs read
into one row of doubles (:data:`FIELDS`, 168 bytes) and drops the object.

The log is still a sequence of requests: ``log[i]`` and iteration give the live object, or
for a retired one a new, detached :class:`Request` carrying the same numbers (its session
reduced to its id; no prompt segments, which nothing reads after a request is done). Outputs
that read every request (summary.json, requests.csv, the report) read columns instead:
:func:`request_columns` gives numpy arrays for a log or for a plain list of requests.
"""

from __future__ import annotations

from array import array
from struct import Struct
from collections.abc import Iterable, Sequence

import numpy as np

from sim.request import Request, RequestStatus
from sim.views import IndexedSequence

#: A retired request's row, in this order (times in seconds; NaN where a time is None).
FIELDS = (
    "request_id", "session_id", "turn", "status", "reject_reason", "arrival_s", "admitted_s",
    "first_token_s", "last_token_s", "finish_s", "client_first_s", "client_last_s",
    "num_prompt_tokens", "prefix_len", "num_cached_tokens", "max_tokens", "num_output_tokens",
    "num_computed_tokens", "num_generated", "num_preemptions", "num_swaps",
)
_NF = len(FIELDS)
_PACK_ROW = Struct(f"{_NF}d").pack  # a row's doubles (faster than array.extend's per-item conversion)
_INDEX = {name: i for i, name in enumerate(FIELDS)}
#: ``status`` is stored as the index of the request's status in this tuple.
STATUSES = tuple(RequestStatus)
_STATUS_CODE = {s: float(i) for i, s in enumerate(STATUSES)}
_NAN = float("nan")
_INT_FIELDS = frozenset(FIELDS[:3] + FIELDS[12:])
_TIME_FIELDS = FIELDS[6:12]  # may be None on a request
_NOT_ATTRIBUTES = frozenset(("session_id", "status", "reject_reason"))  # decoded apart


def _t(v: float | None) -> float:
    return _NAN if v is None else v


def _row(req: Request, reasons: dict[str, int]) -> tuple:
    """``req``'s numbers in FIELDS order (reject reasons as codes into ``reasons``)."""
    reason = req.reject_reason
    if reason is None:
        code = -1.0
    else:
        code = reasons.get(reason)
        if code is None:
            code = reasons[reason] = len(reasons)
    session = req.session
    admitted, first, last, finish, client_first, client_last = (  # _t of each, inlined
        req.admitted_s, req.first_token_s, req.last_token_s, req.finish_s, req.client_first_s, req.client_last_s)
    return (req.request_id, -1 if session is None else session.session_id, req.turn,
            _STATUS_CODE[req.status], code, req.arrival_s, _NAN if admitted is None else admitted,
            _NAN if first is None else first, _NAN if last is None else last, _NAN if finish is None else finish,
            _NAN if client_first is None else client_first, _NAN if client_last is None else client_last,
            req.num_prompt_tokens, req.prefix_len, req.num_cached_tokens, req.max_tokens,
            req.num_output_tokens, req.num_computed_tokens, req.num_generated, req.num_preemptions,
            req.num_swaps)


class SessionId:
    """A retired request's session: its id only (the spec is not kept)."""

    __slots__ = ("session_id",)

    def __init__(self, session_id: int) -> None:
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"SessionId({self.session_id})"


class RequestLog(IndexedSequence):
    """The requests of a run in arrival order (a request's id is its index): the live ones
    as objects, the retired ones (finished or rejected) as rows of numbers."""

    _what = "request"

    def __init__(self) -> None:
        self._live: dict[int, Request] = {}
        self._row_of = array("q")  # index -> row of ``_rows`` (-1: live)
        self._rows = array("d")
        self._reasons: dict[str, int] = {}  # reject reason -> code

    def append(self, req: Request) -> None:
        if req.request_id != len(self._row_of):
            raise ValueError(f"request {req.request_id} appended as number {len(self._row_of)}")
        self._live[req.request_id] = req
        self._row_of.append(-1)

    def retire(self, req: Request) -> None:
        """Keep ``req`` (finished or rejected, its outputs final) as a row; drop the object."""
        if self._live.pop(req.request_id, None) is None:
            return  # retired already
        self._row_of[req.request_id] = len(self._rows) // _NF
        self._rows.frombytes(_PACK_ROW(*_row(req, self._reasons)))

    @property
    def num_live(self) -> int:
        return len(self._live)

    def __len__(self) -> int:
        return len(self._row_of)

    def _item(self, i: int) -> Request:
        row = self._row_of[i]
        if row < 0:
            return self._live[i]
        return self._revive(self._rows[row * _NF:(row + 1) * _NF])

    def _revive(self, v: Sequence[float]) -> Request:
        """A detached Request with a retired row's numbers (no prompt segments, no session)."""
        req = Request.__new__(Request)
        for name, x in zip(FIELDS, v):
            if name in _NOT_ATTRIBUTES:
                continue
            if name in _INT_FIELDS:
                setattr(req, name, int(x))
            elif name in _TIME_FIELDS:
                setattr(req, name, None if x != x else x)
            else:
                setattr(req, name, x)
        req.status = STATUSES[int(v[_INDEX["status"]])]
        code = int(v[_INDEX["reject_reason"]])
        req.reject_reason = None if code < 0 else list(self._reasons)[code]
        sid = int(v[_INDEX["session_id"]])
        req.prompt_segments, req.session, req.block_hashes = (), (None if sid < 0 else SessionId(sid)), []
        req.admit_seq, req.slot_room, req.own_from, req.followed, req.token_s = -1, 0, None, True, None
        return req

    def columns(self, names: Iterable[str] = FIELDS, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
        """The named FIELDS of requests ``start`` to ``stop`` (all by default), in arrival
        order, as float arrays (NaN for a time not reached; ``status``: index into
        :data:`STATUSES`; ``reject_reason``: index into :meth:`reasons`, -1 for none)."""
        names = tuple(names)
        stop = len(self) if stop is None else min(stop, len(self))
        idx = np.frombuffer(self._row_of, dtype=np.int64)[start:stop] if len(self._row_of) else np.zeros(0, np.int64)
        rows = np.frombuffer(self._rows, dtype=float).reshape(-1, _NF) if len(self._rows) else np.zeros((0, _NF))
        retired = idx >= 0
        live = sorted(i - start for i in self._live if start <= i < stop)
        live_rows = [_row(self._live[i + start], self._reasons) for i in live]
        out = {}
        for name in names:
            j = _INDEX[name]
            col = np.empty(idx.size, dtype=float)
            col[retired] = rows[idx[retired], j]
            if live:
                col[live] = [r[j] for r in live_rows]
            out[name] = col
        return out

    def reasons(self) -> list[str]:
        """Reject reasons by code."""
        return list(self._reasons)


def request_columns(requests, names: Iterable[str] = FIELDS, start: int = 0,
                    stop: int | None = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """(columns, reject reasons by code) of requests ``start`` to ``stop`` (all by default)
    of ``requests``: a :class:`RequestLog` or any sequence of Request objects (a real
    engine's, a test's). Reason codes are the whole log's."""
    if isinstance(requests, RequestLog):
        cols = requests.columns(names, start, stop)
        return cols, requests.reasons()
    reasons: dict[str, int] = {}
    rows = [_row(r, reasons) for r in requests[start:stop]]
    table = np.array(rows, dtype=float).reshape(-1, _NF)
    return {name: table[:, _INDEX[name]] for name in names}, list(reasons)


class Tally:
    """Stands in for a scheduler's ``finished`` or ``rejected`` list during a simulation:
    it counts the requests appended and hands each to ``sink`` instead of keeping it (the
    simulation retires them into its :class:`RequestLog`). It cannot be iterated."""

    __slots__ = ("n", "sink")

    def __init__(self, sink) -> None:
        self.n = 0
        self.sink = sink

    def append(self, req: Request) -> None:
        self.n += 1
        self.sink(req)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        raise TypeError("a simulation's scheduler counts its finished and rejected requests; "
                        "read them from the run's requests")

"""Per-request latencies and counts over a whole run, as arrays.

The same arithmetic as :func:`sim.engine.logs.metrics.request_latencies` request by request,
done on the columns of :func:`sim.engine.logs.request_log.request_columns`, so a run of a
million requests is summarised without a million objects.
"""

from __future__ import annotations

import numpy as np

from sim.engine.logs.request_log import STATUSES, request_columns
from sim.request import RequestStatus

#: The columns :func:`latency_columns` reads.
LATENCY_INPUTS = ("arrival_s", "first_token_s", "last_token_s", "finish_s", "client_first_s",
                  "client_last_s", "num_output_tokens")


def latency_columns(c: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ttft_s, tpot_s, e2e_s) of every request as its client sees them: NaN where undefined
    (not finished; TPOT of a one-token answer). With a modelled front end the client's
    times are when the tokens were streamed, else the engine's."""
    done = ~np.isnan(c["finish_s"])
    client = ~np.isnan(c["client_last_s"])
    first = np.where(client, c["client_first_s"], c["first_token_s"])
    last = np.where(client, c["client_last_s"], c["last_token_s"])
    n = c["num_output_tokens"]
    nan = np.full(first.size, np.nan)
    ttft = np.where(done, first - c["arrival_s"], nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(done & (n > 1), (last - first) / (n - 1), nan)
    e2e = np.where(done, np.where(client, c["client_last_s"], c["finish_s"]) - c["arrival_s"], nan)
    return ttft, tpot, e2e


class RunRequests:
    """What summary.json and the outputs read about a run's requests, from its columns."""

    def __init__(self, requests, extra: tuple[str, ...] = (), start: int = 0, stop: int | None = None) -> None:
        """Requests ``start`` to ``stop`` of ``requests`` (all by default)."""
        names = tuple(dict.fromkeys(LATENCY_INPUTS + ("num_prompt_tokens", "reject_reason", "status") + extra))
        self.c, reasons = request_columns(requests, names, start, stop)
        self.reasons = reasons  # reject reason by code
        self.n = self.c["arrival_s"].size
        self.done = ~np.isnan(self.c["finish_s"])
        codes = self.c["reject_reason"]
        self.rejected = codes >= 0
        self.ttft, self.tpot, self.e2e = latency_columns(self.c)
        # reject reason -> count, in the order each reason first occurs among the requests
        counts: dict[str, int] = {}
        for code in codes[self.rejected].astype(int).tolist():
            counts[reasons[code]] = counts.get(reasons[code], 0) + 1
        self.rejected_by_reason = counts
        self.num_done = int(self.done.sum())
        self.num_rejected = int(self.rejected.sum())

    def _done(self, among: np.ndarray | None) -> np.ndarray:
        return self.done if among is None else self.done & among

    def done_ttft(self, among: np.ndarray | None = None) -> np.ndarray:
        """TTFT of the finished requests (of those ``among`` marks, a boolean mask, if given)."""
        return self.ttft[self._done(among)]

    def done_tpot(self, among: np.ndarray | None = None) -> np.ndarray:
        """TPOT of the finished requests that have one (two or more output tokens)."""
        t = self.tpot[self._done(among)]
        return t[~np.isnan(t)]

    def done_e2e(self) -> np.ndarray:
        return self.e2e[self.done]

    def meets(self, ttft_s: float, tpot_s: float, among: np.ndarray | None = None) -> int:
        """Finished requests within both limits (one without a TPOT: within TTFT's)."""
        done = self._done(among)
        t, p = self.ttft[done], self.tpot[done]
        return int(((t <= ttft_s) & (np.isnan(p) | (p <= tpot_s))).sum())

    def done_sum(self, column: str) -> int:
        return int(self.c[column][self.done].sum())

    def status_is(self, status: RequestStatus) -> np.ndarray:
        return self.c["status"] == STATUSES.index(status)

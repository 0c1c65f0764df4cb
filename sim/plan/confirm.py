"""The answer's rate at steady state: a confirmation run, and a step down where it fails.

A probe's few hundred requests start on an idle engine: the first requests see an empty
queue and an empty KV pool, and near capacity a queue that grows by a request a second
takes minutes to show in the percentiles. Short probes therefore overstate the max rate
(measured: Llama-3-70B on 8 H100s, p95 TPOT <= 50 ms; 600-request probes pass 12.5 req/s,
where 6,000 requests give p95 TPOT 69 ms and 10,000 a p95 TTFT of 39 s). Three remedies,
each a ``search`` key (sim/plan/spec.py):

- ``min_duration_s``: a probe's arrivals span at least this long (more requests at higher
  rates: ``SearchSpec.probe_requests``);
- ``warmup``: the earliest arrivals (this share of a probe's requests) are not judged:
  they must still finish, but their latencies do not count;
- ``confirm_duration_s``: once the search has its answer, the search goes on from it with
  probes whose arrivals span this long, as a warm search does (sim/plan/reuse.py): down
  from it while they fail, up while they pass (steps of ``tolerance``, doubling), then
  bisection, to a passing rate next to a failing one at that length, or ``slo-unreachable``
  when even ``min_rate`` fails. Short probes are mostly optimistic; where caches warm over a
  run (prefix caching behind a prefix-aware router) they can be pessimistic too, which is
  why the confirmation climbs as well: ``plan-router.yaml``'s best unit passed 1.2x its
  short answer at length.
"""

from __future__ import annotations

from sim.plan.reuse import search_from


def confirm(evaluate_long, search, best: dict) -> tuple[dict | None, list[dict]]:
    """(the confirmed answer or None, the confirmation probes in order) for the short
    search's ``best`` probe; ``evaluate_long(rate)`` runs a confirmation-length probe."""
    return search_from(evaluate_long, search, best["rate"])


def confirmation_record(search, short_best: dict, answer: dict | None, probes: list[dict]) -> dict:
    """plan.json's ``confirmation`` of one configuration."""
    return {"duration_s": search.confirm_duration_s, "search_max_rate": short_best["rate"],
            "passed_at_search_rate": probes[0]["passed"], "num_probes": len(probes),
            "max_rate": None if answer is None else answer["rate"], "probes": probes}


def steady_note(r: dict) -> str:
    """Words after a record's max rate: how the confirmation run judged it ("" without one)."""
    c = r.get("confirmation")
    if not c or c["max_rate"] is None:
        return ""
    n = r["at_max_rate"]["num_requests"]
    if c["max_rate"] == c["search_max_rate"]:
        return f", confirmed over {n:,} requests"
    return f" at steady state over {n:,} requests (short probes said {c['search_max_rate']:.2f})"

"""Sweep points whose results are identical: grouped, and why when it can be told.

Two ok points are *identical* when every number of their outcome is the same: the requests'
counts, latencies (TTFT, TPOT, ITL, E2E), throughputs, goodput and SLO share, the KV pool's numbers,
the preemptions, the engine's counters and each replica's (summary.json's sections ``requests``,
``ttft_s``, ``tpot_s``, ``itl_s``, ``e2e_s``, ``throughput``, ``goodput_requests_per_s``,
``slo.attained_fraction``, ``kv``, ``preemptions``, ``engine``, ``replicas``). The sections that
echo the settings (``policies``, ``profile``, the SLO's limits) and wall-clock time are left out:
they differ by construction. The simulator is deterministic, so equal numbers mean the keys
that differ between the points changed nothing in these runs.

The reason, where the summaries show it: a preemption key (``scheduler.preemption``,
``scheduler.preemption_victim``, ``kv.swap_space_gb``, ``kv.swap_transfer``) varied and no
preemption happened (or, for the swap space's keys, no request was swapped);
``kv.prefix_cache_eviction`` varied with prefix caching off, or with no cached block evicted.
Otherwise the note names the keys that had no effect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sim.outputs.files import flatten

_OUTCOME = ("requests.", "ttft_s.", "tpot_s.", "itl_s.", "e2e_s.", "throughput.", "kv.", "preemptions.", "engine.")
_OUTCOME_KEYS = ("goodput_requests_per_s", "slo.attained_fraction", "replicas")
_PREEMPTION_KEYS = ("scheduler.preemption", "scheduler.preemption_victim")
_SWAP_KEYS = ("kv.swap_space_gb", "kv.swap_transfer")
#: The columns results.csv gets from here, last.
IDENTICAL_COLUMNS = ("identical_to", "identical_note")


@dataclass(frozen=True)
class IdenticalGroup:
    points: tuple[int, ...]  # indexes into plan.points, in grid order (two or more)
    point_ids: tuple[str, ...]
    keys: tuple[str, ...]  # grid keys whose values differ within the group
    reason: str  # "no preemption happened, so scheduler.preemption had no effect", ...

    def numbers(self) -> str:
        """The points as the terminal numbers them: 1-based, results.csv's row order."""
        return ", ".join(str(i + 1) for i in self.points)


def outcome(summary: dict) -> str:
    """The numbers two identical points share (module docstring), as one comparable text."""
    flat = flatten(summary)
    kept = {k: v for k, v in flat.items() if k.startswith(_OUTCOME) or k in _OUTCOME_KEYS}
    kept.pop("kv.token_eviction", None)  # the setting's name, echoed
    return json.dumps(kept, sort_keys=True)


def _all(summaries: list[dict], test) -> bool:
    try:
        return all(test(s) for s in summaries)
    except (KeyError, TypeError):  # an older or partial summary: no reason given
        return False


def _why(key: str, summaries: list[dict]) -> str | None:
    """Why ``key`` had no effect on these runs, where their summaries show it (else None)."""
    pre = [s.get("preemptions", {}) for s in summaries]
    if key in _PREEMPTION_KEYS + _SWAP_KEYS and _all(pre, lambda p: p["recompute"] + p["swap"] == 0):
        return f"no preemption happened, so {key} had no effect"
    if key in _SWAP_KEYS and _all(pre, lambda p: p["swap"] == 0):
        return f"no request was swapped, so {key} had no effect"
    if key == "kv.prefix_cache_eviction":
        if _all(summaries, lambda s: s["policies"]["prefix_caching"] is False):
            return "prefix caching is off, so kv.prefix_cache_eviction had no effect"
        if _all(summaries, lambda s: s["kv"]["prefix_cache_evictions"] == 0):
            return "no cached prefix block was evicted, so kv.prefix_cache_eviction had no effect"
    return None


def _reason(keys: list[str], summaries: list[dict]) -> str:
    told = {k: _why(k, summaries) for k in keys}
    untold = [k for k, why in told.items() if why is None]
    parts = [why for why in told.values() if why is not None]
    if untold:
        parts.append(f"{' and '.join(untold)} had no effect on these runs")
    return "; ".join(parts) or "the same results"


def identical_groups(plan, records: dict[str, dict]) -> list[IdenticalGroup]:
    """The groups of two or more ok points with identical outcomes, in grid order of their first point."""
    by_outcome: dict[str, list[int]] = {}
    for i, p in enumerate(plan.points):
        rec = records.get(p.point_id)
        if rec and rec.get("status") == "ok" and isinstance(rec.get("summary"), dict):
            by_outcome.setdefault(outcome(rec["summary"]), []).append(i)
    groups = []
    for members in by_outcome.values():
        if len(members) < 2:
            continue
        points = [plan.points[i] for i in members]
        keys = [k for k in plan.keys if len({json.dumps(p.values[k], sort_keys=True) for p in points}) > 1]
        summaries = [records[p.point_id]["summary"] for p in points]
        groups.append(IdenticalGroup(tuple(members), tuple(p.point_id for p in points), tuple(keys),
                                     _reason(keys, summaries)))
    return sorted(groups, key=lambda g: g.points[0])


def identical_columns(plan, records: dict[str, dict]) -> dict[str, dict]:
    """results.csv's ``identical_to`` (the group's first point id) and ``identical_note`` (its
    reason), by point id, for the points in a group; every point of a group has them, its first too."""
    out = {}
    for g in identical_groups(plan, records):
        for pid in g.point_ids:
            out[pid] = {"identical_to": g.point_ids[0], "identical_note": g.reason}
    return out

"""What ``sim plan``'s table says beside the ranking: a short reason for each configuration that
failed, and the configurations that cost the same, with the redundancy each gives.

Two feasible configurations *tie* when their cost per hour is equal (the ranking then puts the
higher max rate first). What tells them apart is redundancy: with one replica down, a
configuration of R replicas keeps (R - 1) / R of its capacity, i.e. (R - 1) x its max rate
(in a plan with units: units x the unit's max rate x (R - 1) / R, the replicas taken to share
the load evenly). One TP-8 replica down serves nothing; one of two TP-4 replicas down still
serves half. plan.json's records carry ``one_replica_down_rate`` (req/s, feasible ones) and
``tied_with`` (the ranks of the configurations costing the same).
"""

from __future__ import annotations

import math
import re

#: Tie lines printed at most (plan.json lists every tie).
MAX_TIE_LINES = 5
#: Configurations named in one tie line at most.
MAX_TIED = 4
SHORT_REASON_CHARS = 72


def one_replica_down_rate(r: dict) -> float:
    """req/s a feasible configuration still serves with one of its replicas down."""
    capacity = (r["units"] if r.get("units") is not None else r["replicas"]) * r["max_rate"]
    return capacity * (r["replicas"] - 1) / r["replicas"]


def mark_ties(ranked: list[dict]) -> None:
    """Set ``one_replica_down_rate`` and ``tied_with`` on the feasible records (ranked, cheapest first)."""
    feasible = [r for r in ranked if r["status"] == "feasible"]
    for r in feasible:
        r["one_replica_down_rate"] = one_replica_down_rate(r)
        r["tied_with"] = [o["rank"] for o in feasible
                          if o is not r and math.isclose(o["cost_per_hour"], r["cost_per_hour"], rel_tol=1e-9)]


def tie_groups(ranked: list[dict]) -> list[list[dict]]:
    """Feasible configurations costing the same, each group in rank order, cheapest group first."""
    groups, seen = [], set()
    for r in ranked:
        if r["status"] != "feasible" or not r.get("tied_with") or r["rank"] in seen:
            continue
        group = [r] + [o for o in ranked if o.get("rank") in r["tied_with"]]
        seen.update(o["rank"] for o in group)
        groups.append(group)
    return groups


def _shape(r: dict) -> str:
    return f"{r['replicas']} replica{'s' if r['replicas'] != 1 else ''} x {r['gpus'] // r['replicas']} GPU"


def _one_down(r: dict, target: float) -> str:
    if r["replicas"] == 1:
        return "no redundancy, one down serves nothing"
    down = r["one_replica_down_rate"]
    if down >= target * (1 - 1e-9):
        return f"one down still serves the target ({down:.2f} req/s)"
    return f"one down serves {down:.2f} req/s ({down / target:.0%} of the target)"


def tie_lines(ranked: list[dict], target: float) -> list[str]:
    """One line per group of configurations costing the same, with each one's redundancy."""
    lines = []
    for group in tie_groups(ranked)[:MAX_TIE_LINES]:
        shown = group[:MAX_TIED]
        more = f"; and {len(group) - MAX_TIED} more (plan.json tied_with)" if len(group) > MAX_TIED else ""
        names = ", ".join(f"#{r['rank']}" for r in shown)
        head = f"tie: {names} cost the same ({group[0]['cost_per_hour']:,.2f} USD/h)"
        told = [(_shape(r), _one_down(r, target)) for r in group]
        if len(set(told)) == 1:  # alike in redundancy too: the ranking went by max rate
            lines.append(f"{head} with the same redundancy: {told[0][0]} each, {told[0][1]}{more}")
        else:
            lines.append(f"{head}: " + "; ".join(f"#{r['rank']} {shape}: {down}" for r, (shape, down)
                                                   in zip(shown, told)) + more)
    return lines


def _failed_limits(probe: dict, slo) -> str:
    """Which of the SLO's tests the probe at min_rate failed."""
    q = f"p{slo.percentile:g}"
    parts = []
    if probe.get("in_flight") or probe.get("rejected"):
        parts.append(f"did not drain ({probe.get('rejected', 0)} rejected, {probe.get('in_flight', 0)} in flight)")
    if probe.get("ttft_s") is not None and probe["ttft_s"] > slo.ttft_s:
        parts.append(f"{q} TTFT {probe['ttft_s'] * 1e3:,.0f} > {slo.ttft_s * 1e3:g} ms")
    if probe.get("tpot_s") is not None and probe["tpot_s"] > slo.tpot_s:
        parts.append(f"{q} TPOT {probe['tpot_s'] * 1e3:,.1f} > {slo.tpot_s * 1e3:g} ms")
    if probe.get("attainment") is not None and probe["attainment"] < slo.attainment:
        parts.append(f"attainment {probe['attainment']:.0%} < {slo.attainment:.0%}")
    return ", ".join(parts)


def short_reason(r: dict, spec) -> str:
    """The table's reason for a configuration that is not feasible ("" for a feasible one): for an
    infeasible one the memory plan's first clause (plan.csv has it whole), for an unreachable SLO
    the limits the probe at ``search.min_rate`` missed, for an error its first line."""
    if r["status"] == "feasible":
        return ""
    if r["status"] == "slo-unreachable" and r.get("probes"):
        first = min(r["probes"], key=lambda p: p["rate"])
        failed = _failed_limits(first, spec.slo)
        if failed:
            return f"at {first['rate']:g} req/s: {failed}"
    text = str(r.get("reason") or "").splitlines()[0] if r.get("reason") else ""
    text = text.split("; ")[0]
    if r["status"] == "infeasible":
        text = re.sub(r" \([^()]*\)", "", text)  # the sizes in brackets: plan.csv keeps them
        if len(text) > SHORT_REASON_CHARS and ": " in text:
            text = text.split(": ")[0]
    return text if len(text) <= SHORT_REASON_CHARS else text[:SHORT_REASON_CHARS - 1] + "…"

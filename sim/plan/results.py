"""From searched configurations to a plan: replicas, GPUs and cost for the target rate, the
ranking, the reasons, and plan.json / plan.csv.

replicas = ceil(target_rate / max_rate); GPUs = replicas x GPUs per replica (tensor x
pipeline parallel size); cost per hour = GPUs x price per GPU-hour; cost per million output
tokens = cost per hour / (target rate x mean output tokens per request at the max rate x
3600) x 1e6. Replicas are assumed
to share the load evenly (a perfect router): the plan does not simulate the fleet.

In a plan with units (sim/plan/unit.py) a configuration's max rate is its unit's, and
units = ceil(target_rate / max_rate), replicas = units x the unit's replicas, GPUs = units
x the unit's GPUs; the units share the target evenly (the router inside a unit is
simulated, the one above the units is not). The reasons then compare cluster choices
(sim/plan/explain.py).
"""

from __future__ import annotations

import csv
import io
import json
import math

from sim.plan.confirm import steady_note
from sim.plan.explain import unit_why
from sim.plan.spec import PlanSpec
from sim.plan.ties import mark_ties
from sim.plan.unit import split_label

STATUS_ORDER = {"feasible": 0, "slo-unreachable": 1, "infeasible": 2, "error": 3}


def add_costs(spec: PlanSpec, record: dict) -> dict:
    price = spec.prices[record["gpu"]]["usd_per_gpu_hour"]
    rec = {**record, "price_per_gpu_hour": price, "replicas": None, "gpus": None, "cost_per_hour": None,
           "cost_per_million_output_tokens": None}
    unit = record.get("unit")
    if unit is not None:
        rec.update(units=None, gpus_per_unit=unit["gpus"])
    if record["status"] == "feasible":
        replicas = math.ceil(spec.target_rate / record["max_rate"] - 1e-9)
        gpus = replicas * record.get("gpus_per_replica", record["tensor_parallel_size"])
        if unit is not None:  # ``replicas`` above counted units
            rec["units"] = replicas
            replicas, gpus = replicas * unit["num_replicas"], replicas * unit["gpus"]
        cost = gpus * price
        mean_out = record["at_max_rate"]["mean_output_tokens"] or 0
        per_m = cost / (spec.target_rate * mean_out * 3600) * 1e6 if mean_out else None
        rec.update(replicas=replicas, gpus=gpus, cost_per_hour=cost, cost_per_million_output_tokens=per_m)
    return rec


def rank(records: list[dict]) -> list[dict]:
    """Cheapest feasible first (ties: higher max rate, then space order); then the others."""
    def key(r):
        if r["status"] == "feasible":
            return (0, r["cost_per_hour"], -r["max_rate"], r["index"])
        return (STATUS_ORDER.get(r["status"], 9), 0.0, 0.0, r["index"])
    ranked = sorted(records, key=key)
    for i, r in enumerate(ranked):
        r["rank"] = i + 1 if r["status"] == "feasible" else None
    return ranked


def pareto(records: list[dict]) -> set[int]:
    """Indexes of feasible configurations no other beats on both cost per hour (lower) and
    max rate per replica (higher)."""
    ok = [r for r in records if r["status"] == "feasible"]
    front = set()
    for r in ok:
        if not any((o["cost_per_hour"] <= r["cost_per_hour"] and o["max_rate"] >= r["max_rate"])
                   and (o["cost_per_hour"] < r["cost_per_hour"] or o["max_rate"] > r["max_rate"]) for o in ok):
            front.add(r["index"])
    return front


def why(spec: PlanSpec, r: dict, ranked: list[dict] | None = None) -> str:
    """One line: why this configuration ranks where it does (``ranked``: every costed
    record, for a unit's comparisons with the other cluster choices)."""
    if r["status"] != "feasible":
        return f"{r['status']}: {r['reason']}"
    if r.get("unit") is not None:
        return unit_why(spec, r, ranked or [r])
    mem, at, q = r["memory"], r["at_max_rate"], f"p{spec.slo.percentile:g}"
    rate = f"{'at least ' if r['capped'] else ''}{r['max_rate']:.2f} req/s{steady_note(r)}"
    tpot = "-" if at["tpot_s"] is None else f"{at['tpot_s'] * 1e3:.0f} ms"
    return (f"KV pool holds {mem['max_full_length_requests']} full-length requests "
            f"({mem['kv_pool_tokens']:,} tokens); max rate {rate} ({q} TTFT {at['ttft_s'] * 1e3:.0f} ms, "
            f"TPOT {tpot}, attainment {at['attainment']:.0%}); {r['replicas']} replica"
            f"{'s' if r['replicas'] != 1 else ''} x {r['gpus'] // r['replicas']} GPU = {r['gpus']} GPUs "
            f"at ${r['price_per_gpu_hour']:.2f}/GPU-h")


def finish(spec: PlanSpec, records: list[dict]) -> list[dict]:
    """Costed, ranked records, each with its one-line reason and Pareto mark."""
    ranked = rank([add_costs(spec, r) for r in records])
    mark_ties(ranked)  # equal cost: tied_with, and each one's one_replica_down_rate (sim/plan/ties.py)
    front = pareto(ranked)
    for r in ranked:
        r["pareto"] = r["index"] in front
        r["why"] = why(spec, r, ranked)
    return ranked


ASSUMPTIONS = ["replicas share the target rate evenly (a perfect router); the fleet is not simulated",
               "a probe passes when the run drains with no rejection, the SLO percentiles of TTFT "
               "and TPOT hold and the attainment share holds, judged past the warm-up (search.warmup)",
               "the answer is confirmed at steady state: its rate rerun with arrivals over "
               "search.confirm_duration_s, stepping down where that fails (sim/plan/confirm.py)"]
ASSUMPTIONS_UNITS = ["a unit (its replicas behind its router, or its prefill and decode pools) is simulated "
                     "whole; units share the target rate evenly (the router above the units is not simulated)",
                     *ASSUMPTIONS[1:]]


def plan_document(spec: PlanSpec, ranked: list[dict], wall_s: float | None = None, probes: dict | None = None) -> dict:
    s, slo = spec.search, spec.slo
    return {
        "plan": spec.name, "file": spec.path, "target_rate": spec.target_rate,
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "percentile": slo.percentile,
                "attainment": slo.attainment},
        "search": {"min_rate": s.min_rate, "max_rate": s.max_rate, "tolerance": s.tolerance,
                   "num_requests": s.num_requests, "min_duration_s": s.min_duration_s, "warmup": s.warmup,
                   "confirm_duration_s": s.confirm_duration_s, "reuse": s.reuse,
                   "seed": "the scenario's seed, the same for every probe (see each configuration's seed)"},
        "keys": list(spec.keys), "prices": spec.prices,
        "assumptions": ASSUMPTIONS_UNITS if spec.clustered else ASSUMPTIONS,
        "wall_s": wall_s,
        "probes": probes,
        "configurations": ranked,
    }


CSV_COLS = ("rank", "index", "status", "gpu", "tensor_parallel_size", "gpus_per_replica", "max_rate", "capped",
            "search_max_rate", "judged_requests", "ttft_s", "tpot_s", "attainment", "kv_pool_tokens", "max_full_length_requests", "replicas", "gpus", "price_per_gpu_hour",
            "cost_per_hour", "cost_per_million_output_tokens", "pareto", "num_probes", "start_rate", "reused_from",
            "probes_saved_estimate", "reason")


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


#: plan.csv's extra columns in a plan with units (after ``gpus_per_replica``).
UNIT_COLS = ("router", "replicas_per_unit", "pd_split", "gpus_per_unit")


def plan_csv(spec: PlanSpec, ranked: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = list(CSV_COLS)
    if spec.clustered:
        pos = cols.index("gpus_per_replica") + 1
        cols[pos:pos] = UNIT_COLS
        cols.insert(cols.index("replicas"), "units")
        cols.insert(cols.index("attainment") + 1, "prefix_cache_hit_rate")
    rest = [c for c in cols[2:] if c not in spec.keys]  # gpu once, when it is searched
    cols = list(CSV_COLS[:2]) + list(spec.keys) + rest
    w.writerow(cols)
    for r in ranked:
        at, mem = r["at_max_rate"] or {}, r["memory"] or {}
        conf = r.get("confirmation") or {}
        flat = {**r, "search_max_rate": conf.get("search_max_rate"), "judged_requests": at.get("judged"),
                "ttft_s": at.get("ttft_s"), "tpot_s": at.get("tpot_s"), "attainment": at.get("attainment"),
                "kv_pool_tokens": mem.get("kv_pool_tokens"),
                "max_full_length_requests": mem.get("max_full_length_requests")}
        if spec.clustered:
            u = r["unit"]
            flat.update(prefix_cache_hit_rate=at.get("prefix_cache_hit_rate"), router=u["router"],
                        replicas_per_unit=u["num_replicas"], gpus_per_unit=u["gpus"],
                        pd_split=split_label(u) if u["prefill_replicas"] is not None else None)
        row = [json.dumps(v) if isinstance(v, (list, dict)) else v for v in (r["values"][k] for k in spec.keys)]
        w.writerow([_cell(flat.get(c)) for c in CSV_COLS[:2]] + [_cell(v) for v in row]
                   + [_cell(flat.get(c)) for c in rest])
    return buf.getvalue()

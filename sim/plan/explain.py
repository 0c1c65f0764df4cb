"""The reasons of a plan with units (sim/plan/unit.py): what the unit sustains, what it
costs, and how its cluster choices compare with the others the space holds for the same
engine settings (every searched key outside ``cluster.*`` equal):

- **router**: against round-robin of the same replicas and split (or, for round-robin
  itself, the best other router): "prefix-aware routing raises the 4-replica unit's max rate
  1.40x over round-robin (prefix cache hit rate 62% vs 9%)";
- **P:D split**: a split against the best one-pool unit of as many replicas, one pool
  against the best split (TTFT and TPOT percentiles at each one's max rate);
- **replicas**: a unit of N replicas against its one-replica twin, per GPU (a unit whose
  max rate per GPU beats one replica's gains from its router; one replica is costed as if
  its copies shared the load perfectly).

Hit rates and latencies are each configuration's at its own max rate.
"""

from __future__ import annotations

from sim.plan.confirm import steady_note
from sim.plan.unit import describe, is_cluster_key, split_label


def _engine_values(r: dict) -> list:
    return [(k, v) for k, v in r["values"].items() if not is_cluster_key(k)]


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0%}"


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.0f} ms"


def _hits(r: dict, o: dict) -> str:
    a, b = r["at_max_rate"].get("prefix_cache_hit_rate"), o["at_max_rate"].get("prefix_cache_hit_rate")
    return "" if a is None and b is None else f" (prefix cache hit rate {_pct(a)} vs {_pct(b)})"


def _lat(spec, r: dict, o: dict) -> str:
    q, a, b = f"p{spec.slo.percentile:g}", r["at_max_rate"], o["at_max_rate"]
    return (f" ({q} TTFT {_ms(a['ttft_s'])} vs {_ms(b['ttft_s'])}, "
            f"TPOT {_ms(a['tpot_s'])} vs {_ms(b['tpot_s'])})")


def _versus(r: dict, o: dict, what: str, other: str, detail: str) -> str:
    """``what`` raises/lowers the max rate against ``o`` (or ``o`` never meets the SLO)."""
    if o["status"] != "feasible":
        return f"{what} meets the SLO where {other} does not ({o['status']})"
    ratio = r["max_rate"] / o["max_rate"]
    verb = "raises" if ratio >= 1 else "lowers"
    return f"{what} {verb} the max rate {ratio:.2f}x against {other}{detail}"


def _router(spec, r: dict, peers: list[dict]) -> str | None:
    u = r["unit"]
    same = [o for o in peers if o["unit"]["num_replicas"] == u["num_replicas"]
            and split_label(o["unit"]) == split_label(u) and o["unit"]["router"] != u["router"]]
    if not same or u["num_replicas"] == 1 or (u["prefill_replicas"] == 1):
        return None  # one (prefill) replica: the router has nothing to choose
    rr = [o for o in same if o["unit"]["router"] == "round-robin"]
    if rr:
        o = rr[0]
    else:
        o = max(same, key=lambda o: (o["status"] == "feasible", o["max_rate"] or 0.0))
    what = f"{u['router']} routing in {describe(u).split(' (')[0]}"
    return _versus(r, o, what, o["unit"]["router"], _hits(r, o))


def _split(spec, r: dict, peers: list[dict]) -> str | None:
    u = r["unit"]
    same_n = [o for o in peers if o["unit"]["num_replicas"] == u["num_replicas"] and u["num_replicas"] > 1]
    if u["prefill_replicas"] is not None:
        pools = [o for o in same_n if o["unit"]["prefill_replicas"] is None]
        if not pools:
            return None
        o = max(pools, key=lambda o: (o["status"] == "feasible", o["max_rate"] or 0.0))
        return _versus(r, o, f"{describe(u).split(' ')[0]} {split_label(u)} prefill:decode split",
                       f"one pool of {u['num_replicas']} ({o['unit']['router']})", _lat(spec, r, o))
    splits = [o for o in same_n if o["unit"]["prefill_replicas"] is not None]
    if not splits:
        return None
    o = max(splits, key=lambda o: (o["status"] == "feasible", o["max_rate"] or 0.0))
    return _versus(r, o, f"one pool of {u['num_replicas']}", f"the best prefill:decode split "
                   f"({split_label(o['unit'])})", _lat(spec, r, o))


def _replicas(r: dict, peers: list[dict]) -> str | None:
    u = r["unit"]
    ones = [o for o in peers if o["unit"]["num_replicas"] == 1 and o["status"] == "feasible"]
    if u["num_replicas"] == 1 or not ones:
        return None
    o = ones[0]
    ratio = (r["max_rate"] / u["gpus"]) / (o["max_rate"] / o["unit"]["gpus"])
    return (f"per GPU the unit sustains {ratio:.2f}x one replica's max rate "
            f"({r['max_rate'] / u['gpus']:.2f} vs {o['max_rate'] / o['unit']['gpus']:.2f} req/s per GPU)"
            + _hits(r, o))


def unit_why(spec, r: dict, ranked: list[dict]) -> str:
    """The reason of a feasible record of a plan with units."""
    u, mem, at, q = r["unit"], r["memory"], r["at_max_rate"], f"p{spec.slo.percentile:g}"
    rate = f"{'at least ' if r['capped'] else ''}{r['max_rate']:.2f} req/s{steady_note(r)}"
    pool = "each decode replica's KV pool" if u["prefill_replicas"] is not None else (
        "each replica's KV pool" if u["num_replicas"] > 1 else "KV pool")
    units = f"{r['units']} unit{'s' if r['units'] != 1 else ''}"
    head = (f"{describe(u)}; {pool} holds {mem['max_full_length_requests']} full-length requests "
            f"({mem['kv_pool_tokens']:,} tokens); max rate {rate} ({q} TTFT {_ms(at['ttft_s'])}, "
            f"TPOT {_ms(at['tpot_s'])}, attainment {at['attainment']:.0%}"
            + ("" if at.get("prefix_cache_hit_rate") is None else
               f", prefix cache hit rate {_pct(at['prefix_cache_hit_rate'])}")
            + f"); {units} x {u['gpus']} GPU{'s' if u['gpus'] != 1 else ''} = {r['gpus']} GPUs at ${r['price_per_gpu_hour']:.2f}/GPU-h")
    mine = _engine_values(r)
    peers = [o for o in ranked if o is not r and o.get("unit") is not None and _engine_values(o) == mine]
    notes = [n for n in (_router(spec, r, peers), _split(spec, r, peers), _replicas(r, peers)) if n]
    return "; ".join([head, *notes])

"""Bracket reuse: a configuration's search starts from its neighbour's answer.

Configurations equal in every searched key but one *pool key* (a key that only resizes the
KV pool: ``engine.gpu_memory_utilization``, ``engine.num_gpu_blocks_override``) form a
chain, ordered by that key, smallest pool first. A larger pool is *expected* to sustain at
least the smaller pool's max rate, so the larger one's search starts there (the
neighbour's max rate) instead of at ``search.min_rate``. It is an expectation, not a
theorem of the simulator (a larger pool admits more requests at once, which can lengthen
every step and so raise TPOT), which is why nothing is ever *pruned* by it: the warm
search checks its start like any other rate and gallops either way from it,

- up while probes pass: start x (1 + tolerance), then steps doubling (x 1.10, 1.20,
  1.40, 1.80, then x 2) until a probe fails or ``max_rate`` passes;
- down while probes fail: start / (1 + tolerance), steps doubling likewise, until a probe
  passes or ``min_rate`` fails (``slo-unreachable``, as in the cold search);

then bisects like the cold search. The answer has the cold search's guarantee (a passing
rate with a failing one within ``tolerance`` above it, or the same edge cases), so for a
verdict monotone in the rate the warm and cold answers agree within the tolerance.

In a plan with units (sim/plan/unit.py) chains form among configurations of the same unit
(same router, replicas and split: every cluster key is one of the keys that must be equal),
so no bracket crosses routers, replica counts or P:D splits. One start crosses them: a
unit of N replicas in one pool, at the head of its chain (no smaller-pool neighbour), whose
*one-replica twin* is in the space (equal in every searched key outside ``cluster.*``, one
replica) starts at N x the twin's max rate: N replicas sharing the load perfectly. A
router's imbalance makes the unit's rate lower, its prefix cache hits (each replica
caching a share of the prefixes) can make it higher: again a start checked like any other
rate, never a bound. Disaggregated units start cold (a split's rate is set by its busier
pool, not N x anything).

Chains run in waves (every chain's smallest pool first, then the next ...; a twin before
its units) so that a configuration's start, and so the whole plan, never depends on worker
count, executor or an interruption: it depends on the neighbour's record only.
"""

from __future__ import annotations

#: Keys that change nothing but the size of the KV pool (larger value, larger pool).
POOL_KEYS = ("engine.gpu_memory_utilization", "engine.num_gpu_blocks_override")

#: Relative gap (beyond float rounding) tolerated when a bracket's width equals the tolerance.
_EPS = 1e-9


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def pool_key(keys, configs) -> str | None:
    """The first searched pool key whose values are all numbers (None: no chains)."""
    for key in POOL_KEYS:
        if key in keys and all(_number(c.values[key]) for c in configs):
            return key
    return None


def chains(keys, configs, key: str | None) -> tuple[dict[int, int], dict[int, int | None]]:
    """(wave of each configuration index, its smaller-pool neighbour's index or None)."""
    if key is None:
        return {c.index: 0 for c in configs}, {c.index: None for c in configs}
    groups: dict[str, list] = {}
    for c in configs:
        rest = repr([(k, c.values[k]) for k in keys if k != key])
        groups.setdefault(rest, []).append(c)
    wave, neighbour = {}, {}
    for members in groups.values():
        members.sort(key=lambda c: c.values[key])
        for i, c in enumerate(members):
            wave[c.index] = i
            neighbour[c.index] = members[i - 1].index if i else None
    return wave, neighbour


def twins(keys, configs) -> dict[int, int]:
    """Unit index -> its one-replica twin's index (module docstring), for units that have one."""
    def engine_values(c) -> str:
        return repr([(k, c.values[k]) for k in keys if not (k == "cluster" or k.startswith("cluster."))])

    single: dict[str, int] = {}
    for c in configs:
        if c.unit is not None and c.unit["num_replicas"] == 1:
            single.setdefault(engine_values(c), c.index)
    out = {}
    for c in configs:
        u = c.unit
        if u is not None and u["num_replicas"] > 1 and u["prefill_replicas"] is None and engine_values(c) in single:
            out[c.index] = single[engine_values(c)]
    return out


def neighbours(keys, configs, key: str | None) -> tuple[dict[int, int], dict[int, int | None], dict[int, int]]:
    """(wave of each configuration, the neighbour its search starts from or None, the factor
    its start is that neighbour's max rate times): smaller-pool chains (:func:`chains`), and a
    chain head's one-replica twin (:func:`twins`, factor N)."""
    _, neighbour = chains(keys, configs, key)
    scale = {i: 1 for i, n in neighbour.items() if n is not None}
    by_index = {c.index: c for c in configs}
    for unit, twin in twins(keys, configs).items():
        if neighbour[unit] is None:
            neighbour[unit], scale[unit] = twin, by_index[unit].unit["num_replicas"]
    wave: dict[int, int] = {}

    def depth(i: int) -> int:
        if i not in wave:
            wave[i] = 0 if neighbour[i] is None else depth(neighbour[i]) + 1
        return wave[i]

    for c in configs:
        depth(c.index)
    return wave, neighbour, scale


def start_rate(record: dict | None, search, scale: float = 1) -> float | None:
    """Where a configuration's search starts given its neighbour's record (None: cold)."""
    if record is None or record["status"] != "feasible" or not search.reuse:
        return None
    return record["max_rate"] * scale


def bisect(evaluate, tolerance: float, lo: dict, hi: dict, probes: list, slack: float = 0.0) -> dict:
    """Halve the bracket between a passing probe ``lo`` and a failing ``hi`` until the
    failing rate is within ``tolerance`` (times ``1 + slack``) of the passing one; the last
    passing probe. Every probe is appended to ``probes``."""
    while hi["rate"] - lo["rate"] > tolerance * lo["rate"] * (1 + slack):
        p = evaluate((lo["rate"] + hi["rate"]) / 2)
        probes.append(p)
        if p["passed"]:
            lo = p
        else:
            hi = p
    return lo


def _bisect(evaluate, search, lo: dict, hi: dict, probes: list) -> dict:
    return bisect(evaluate, search.tolerance, lo, hi, probes, slack=_EPS)


def search_from(evaluate, search, start: float, first: dict | None = None) -> tuple[dict | None, list[dict]]:
    """The warm search (module docstring): (highest passing probe or None, probes in order).
    ``first``: the probe at ``start``, already run (its verdict decides the direction)."""
    start = min(max(start, search.min_rate), search.max_rate)
    first = evaluate(start) if first is None else first
    probes, step = [first], search.tolerance
    if first["passed"]:
        lo = first
        while True:
            if lo["rate"] >= search.max_rate:
                return lo, probes
            p = evaluate(min(lo["rate"] * (1 + step), search.max_rate))
            probes.append(p)
            step = min(step * 2, 1.0)
            if not p["passed"]:
                return _bisect(evaluate, search, lo, p, probes), probes
            lo = p
    hi = first
    while True:
        if hi["rate"] <= search.min_rate:
            return None, probes
        p = evaluate(max(hi["rate"] / (1 + step), search.min_rate))
        probes.append(p)
        step = min(step * 2, 1.0)
        if p["passed"]:
            return _bisect(evaluate, search, p, hi, probes), probes
        hi = p


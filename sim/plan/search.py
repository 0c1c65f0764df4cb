"""One configuration's search: memory feasibility, then the highest arrival rate that
meets the SLO.

A *probe* simulates the configuration at one arrival rate (``search.num_requests``
requests, the scenario's own seed for every probe, so every probe draws the same prompt
and output lengths and the same arrival pattern scaled by the rate). It passes when the
run drained (nothing in flight, nothing rejected), the SLO's percentile of TTFT and of
TPOT are within their limits (percentiles over the completed requests, as numpy's
``percentile``), and the share of requests meeting both limits is at least
``slo.attainment``.

The search brackets (``min_rate``, then doubling until a probe fails or ``max_rate``) and
bisects the last bracket until its width is at most ``tolerance`` times its lower end; the
reported max rate is the highest passing probe, with a failing probe at most that much
above it. Simulated latencies are not exactly monotone in the rate, so the answer is a
rate that passes next to one that fails, not a proof that every lower rate passes.
"""

from __future__ import annotations

import copy
import traceback

import numpy as np

from sim.errors import ConfigError
from sim.plan.reuse import bisect, search_from
from sim.plan.unit import hit_rate, memory_of, run_unit, unit_memory


def _percentile(values, q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def judge(result, slo, rate: float) -> dict:
    """A probe's verdict from a finished run's requests (read as columns)."""
    from sim.engine.logs.request_stats import RunRequests

    rr = RunRequests(result.requests)
    in_flight = rr.n - rr.num_done - rr.num_rejected
    ttft = _percentile(rr.done_ttft(), slo.percentile)
    tpot = _percentile(rr.done_tpot(), slo.percentile)
    met = rr.meets(slo.ttft_s, slo.tpot_s)
    attained = met / rr.n if rr.n else 0.0  # a rejected or unfinished request is a miss
    passed = (in_flight == 0 and rr.num_rejected == 0 and ttft is not None and ttft <= slo.ttft_s
              and (tpot is None or tpot <= slo.tpot_s) and attained >= slo.attainment)
    out_tokens = rr.done_sum("num_output_tokens")
    return {"rate": rate, "passed": passed, "ttft_s": ttft, "tpot_s": tpot, "attainment": attained,
            "completed": rr.num_done, "rejected": rr.num_rejected, "in_flight": in_flight,
            "mean_output_tokens": out_tokens / rr.num_done if rr.num_done else None,
            "simulated_s": result.end_s}


def probe(data: dict, source: str, rate: float, slo, unit: bool = False) -> dict:
    """Simulate ``data`` at ``rate`` requests/s and judge it against ``slo``. ``unit``: the
    configuration is a unit of a plan with units (sim/plan/unit.py): simulate all its
    replicas behind its router, and record the prefix cache's hit rate too. Either way the
    engine is ``sim run``'s (``run_unit``: a pipeline-parallel one in its form's engine)."""
    from sim.config.scenario import parse_scenario

    d = copy.deepcopy(data)
    d["workload"]["arrival"]["rate"] = rate
    result = run_unit(parse_scenario(d, source))
    if not unit:
        return judge(result, slo, rate)
    return {**judge(result, slo, rate), "prefix_cache_hit_rate": hit_rate(result)}


def search_max_rate(evaluate, search) -> tuple[dict | None, list[dict]]:
    """(the highest passing probe or None, every probe in order) for ``evaluate(rate) -> probe``."""
    probes = [evaluate(search.min_rate)]
    if not probes[0]["passed"]:
        return None, probes
    lo, hi = probes[0], None
    while hi is None:
        if lo["rate"] >= search.max_rate:
            return lo, probes
        p = evaluate(min(lo["rate"] * 2, search.max_rate))
        probes.append(p)
        if p["passed"]:
            lo = p
        else:
            hi = p
    return bisect(evaluate, search.tolerance, lo, hi, probes), probes



def memory_summary(data: dict, source: str) -> dict:
    """The configuration's memory plan (ConfigError when it does not fit)."""
    from sim.config.scenario import parse_scenario

    return memory_of(parse_scenario(data, source))


def cold_probe_estimate(search, max_rate: float | None) -> int:
    """Probes the cold search (from ``min_rate``) would run if every rate up to ``max_rate``
    passed and every rate above failed (None: even ``min_rate`` fails): the yardstick of a
    warm-started configuration's ``probes_saved_estimate``."""
    threshold = -1.0 if max_rate is None else max_rate
    return len(search_max_rate(lambda r: {"rate": r, "passed": r <= threshold}, search)[1])


def evaluate_config(config, slo, search, start: float | None = None, neighbour: int | None = None) -> dict:
    """The record of one configuration; never raises (a crash is an ``error`` record).
    ``start``: begin the rate search there (bracket reuse: sim/plan/reuse.py, from
    configuration ``neighbour``'s answer) rather than at ``search.min_rate``.
    Top-level so a process pool can ship it."""
    record = {"index": config.index, "values": config.values, "gpu": config.gpu,
              "tensor_parallel_size": config.tensor_parallel_size,
              "pipeline_parallel_size": config.pipeline_parallel_size,
              "gpus_per_replica": config.tensor_parallel_size * config.pipeline_parallel_size,
              "seed": config.data.get("seed", 0),
              "status": None, "reason": None, "memory": None, "max_rate": None, "capped": False,
              "at_max_rate": None, "start_rate": start, "reused_from": neighbour if start is not None else None,
              "num_probes": 0, "probes_saved_estimate": None, "probes": []}
    unit = config.unit is not None
    if unit:  # a plan with units (sim/plan/unit.py): the unit's shape and GPUs
        record["unit"] = config.unit
    try:
        pools = unit_memory(config.data, config.source) if unit else None
        if pools is None:
            record["memory"] = memory_summary(config.data, config.source)
        else:  # disaggregated: each pool's own plan; the decode pool's (it holds the answers) on top
            record["memory"] = {**pools["decode"], "pools": pools}
    except ConfigError as exc:
        record.update(status="infeasible", reason=exc.message)
        return record
    try:
        def evaluate(rate):
            return probe(config.data, config.source, rate, slo, unit)

        if start is None:
            best, probes = search_max_rate(evaluate, search)
        else:
            best, probes = search_from(evaluate, search, start)
    except Exception as exc:  # noqa: BLE001 -- recorded; the other configurations go on
        record.update(status="error", reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        return record
    record.update(probes=probes, num_probes=len(probes))
    if start is not None:
        cold = cold_probe_estimate(search, None if best is None else best["rate"])
        record["probes_saved_estimate"] = cold - len(probes)
    if best is None:
        first = min(probes, key=lambda p: p["rate"])  # the probe at min_rate
        record.update(status="slo-unreachable", reason=(
            f"fails the SLO at search.min_rate {search.min_rate:g} req/s "
            f"(p{slo.percentile:g} TTFT {_ms(first['ttft_s'])}, TPOT {_ms(first['tpot_s'])}, "
            f"attainment {first['attainment']:.0%})"))
        return record
    record.update(status="feasible", max_rate=best["rate"], at_max_rate=best,
                  capped=best["rate"] >= search.max_rate)
    return record


def _ms(v) -> str:
    return "-" if v is None else f"{v * 1e3:.0f} ms"

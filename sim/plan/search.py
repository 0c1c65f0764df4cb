"""One configuration's search: memory feasibility, then the highest arrival rate that
meets the SLO.

A *probe* simulates the configuration at one arrival rate (``search.num_requests``
requests, or more so that the arrivals span ``search.min_duration_s``; the scenario's own
seed for every probe, so every probe draws the same prompt and output lengths and the same
arrival pattern scaled by the rate). It passes when the run drained (nothing in flight,
nothing rejected), the SLO's percentile of TTFT and of TPOT are within their limits
(percentiles over the completed requests past the warm-up, as numpy's ``percentile``), and
the share of those requests meeting both limits is at least ``slo.attainment``. The
earliest ``search.warmup`` share of the arrivals is the warm-up: those requests must
finish, but their latencies are not judged.

The search brackets (``min_rate``, then doubling until a probe fails or ``max_rate``) and
bisects the last bracket until its width is at most ``tolerance`` times its lower end; the
answer is the highest passing probe, with a failing probe at most that much above it. That
answer is then confirmed at steady state (``search.confirm_duration_s``: sim/plan/confirm.py),
and the reported max rate is the confirmed one. Simulated latencies are not exactly monotone in the rate, so the answer is a
rate that passes next to one that fails, not a proof that every lower rate passes.
"""

from __future__ import annotations

import copy
import traceback

import numpy as np

from sim.errors import ConfigError
from sim.plan.confirm import confirm, confirmation_record
from sim.plan.reuse import bisect, search_from
from sim.plan.unit import hit_rate, memory_of, run_unit, unit_memory


def _percentile(values, q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def judge(result, slo, rate: float, warmup: float = 0.0) -> dict:
    """A probe's verdict from a finished run's requests (read as columns); the earliest
    ``warmup`` share of the arrivals is not judged (but must have finished)."""
    from sim.engine.logs.request_stats import RunRequests

    rr = RunRequests(result.requests)
    in_flight = rr.n - rr.num_done - rr.num_rejected
    judged = np.ones(rr.n, dtype=bool)
    skip = int(warmup * rr.n)
    if skip:
        judged[np.argsort(rr.c["arrival_s"], kind="stable")[:skip]] = False
    ttft = _percentile(rr.done_ttft(judged), slo.percentile)
    tpot = _percentile(rr.done_tpot(judged), slo.percentile)
    met = rr.meets(slo.ttft_s, slo.tpot_s, judged)
    num_judged = int(judged.sum())
    attained = met / num_judged if num_judged else 0.0  # a rejected or unfinished request is a miss
    passed = (in_flight == 0 and rr.num_rejected == 0 and ttft is not None and ttft <= slo.ttft_s
              and (tpot is None or tpot <= slo.tpot_s) and attained >= slo.attainment)
    out_tokens = rr.done_sum("num_output_tokens")
    return {"rate": rate, "passed": passed, "ttft_s": ttft, "tpot_s": tpot, "attainment": attained,
            "completed": rr.num_done, "rejected": rr.num_rejected, "in_flight": in_flight,
            "num_requests": rr.n, "judged": num_judged,
            "mean_output_tokens": out_tokens / rr.num_done if rr.num_done else None,
            "simulated_s": result.end_s}


def probe(data: dict, source: str, rate: float, slo, unit: bool = False,
          num_requests: int | None = None, warmup: float = 0.0, planned: tuple | None = None) -> dict:
    """Simulate ``data`` at ``rate`` requests/s and judge it against ``slo``. ``unit``: the
    configuration is a unit of a plan with units (sim/plan/unit.py): simulate all its
    replicas behind its router, and record the prefix cache's hit rate too. Either way the
    engine is ``sim run``'s (``run_unit``: a pipeline-parallel one in its form's engine).
    ``num_requests``: the probe's length (default: the scenario's); ``warmup``: :func:`judge`'s;
    ``planned``: the configuration's ``build_plan``, made once for all its probes."""
    from sim.config.scenario import parse_scenario

    d = copy.deepcopy(data)
    d["workload"]["arrival"]["rate"] = rate
    if num_requests is not None:
        d["workload"]["num_requests"] = num_requests
    result = run_unit(parse_scenario(d, source), planned)
    if not unit:
        return judge(result, slo, rate, warmup)
    return {**judge(result, slo, rate, warmup), "prefix_cache_hit_rate": hit_rate(result)}


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



def memory_plan(data: dict, source: str) -> tuple[dict, tuple]:
    """The configuration's memory plan as plan.json's ``memory``, and ``build_plan``'s tuple
    for its probes (ConfigError when it does not fit)."""
    from sim.config.scenario import parse_scenario
    from sim.engine.parts import build_plan

    sc = parse_scenario(data, source)
    planned = build_plan(sc)
    return memory_of(sc, planned), planned


def cold_probe_rates(search, max_rate: float | None) -> list[float]:
    """The rates the cold search (from ``min_rate``) would probe if every rate up to
    ``max_rate`` passed and every rate above failed (None: even ``min_rate`` fails)."""
    threshold = -1.0 if max_rate is None else max_rate
    return [p["rate"] for p in search_max_rate(lambda r: {"rate": r, "passed": r <= threshold}, search)[1]]


def cold_probe_estimate(search, max_rate: float | None) -> int:
    """Probes of :func:`cold_probe_rates`: the yardstick of a warm-started configuration's
    ``probes_saved_estimate``."""
    return len(cold_probe_rates(search, max_rate))


#: A plan of more configurations than this says up front how much simulation it is.
LARGE_PLAN = 200


#: Simulated requests a second one worker gets through on a plan of single engines with the
#: chatbot's lengths (measured on a shared 2-core VM: 4,800-4,900; units of 4 replicas ~1,400).
REQUESTS_PER_WORKER_S = 5000


def workload_note(spec, to_search: int, workers: int) -> str | None:
    """One line for a large plan (None for a small one): the probes its searches will run
    if each configuration's answer sits mid-range (the geometric mean of min_rate and
    max_rate), the simulated requests of those probes and of one confirmation each, and the
    rough hours that is at REQUESTS_PER_WORKER_S."""
    if to_search <= LARGE_PLAN:
        return None
    s = spec.search
    mid = (s.min_rate * s.max_rate) ** 0.5
    rates = cold_probe_rates(s, mid)
    requests = to_search * (sum(s.probe_requests(r) for r in rates)
                            + (s.probe_requests(mid, s.confirm_duration_s) if s.confirm_duration_s > 0 else 0))
    hours = requests / REQUESTS_PER_WORKER_S / max(workers, 1) / 3600
    return (f"plan: {to_search:,} configurations to search: about {len(rates) * to_search:,} probes, "
            f"{requests:,} simulated requests (answers mid-range), roughly {hours:.1f} h with {workers} "
            f"worker{'s' if workers != 1 else ''} (more for units of several replicas); narrow the space, "
            f"add workers (--executor ray) or shorten search.confirm_duration_s; --resume continues")


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
        pools, planned = (unit_memory(config.data, config.source) if unit else None), None
        if pools is None:
            record["memory"], planned = memory_plan(config.data, config.source)
        else:  # disaggregated: each pool's own plan; the decode pool's (it holds the answers) on top
            record["memory"] = {**pools["decode"], "pools": pools}
    except ConfigError as exc:
        record.update(status="infeasible", reason=exc.message)
        return record
    try:
        def evaluate(rate, duration_s=None):
            return probe(config.data, config.source, rate, slo, unit,
                         search.probe_requests(rate, duration_s), search.warmup, planned)

        if start is None:
            best, probes = search_max_rate(evaluate, search)
        else:
            best, probes = search_from(evaluate, search, start)
        short_best = best
        if best is not None and search.confirm_duration_s > 0:
            best, checks = confirm(lambda r: evaluate(r, search.confirm_duration_s), search, best)
            record["confirmation"] = confirmation_record(search, short_best, best, checks)
    except ConfigError as exc:  # what sim run refuses at start (e.g. V0's virtual engines' 1/pp pools)
        record.update(status="infeasible", reason=exc.message)
        return record
    except Exception as exc:  # noqa: BLE001 -- recorded; the other configurations go on
        record.update(status="error", reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        return record
    record.update(probes=probes, num_probes=len(probes))
    if start is not None:
        cold = cold_probe_estimate(search, None if short_best is None else short_best["rate"])
        record["probes_saved_estimate"] = cold - len(probes)
    if best is None and short_best is not None:  # the short probes passed; steady state did not
        c = record["confirmation"]
        record.update(status="slo-unreachable", reason=(
            f"passes {search.probe_requests(short_best['rate'])}-request probes up to {short_best['rate']:.3g} "
            f"req/s but fails at steady state (arrivals over {search.confirm_duration_s:g} s) down to "
            f"search.min_rate {search.min_rate:g} req/s ({c['num_probes']} confirmation runs)"))
        return record
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

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


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else None


def judge(result, slo, rate: float) -> dict:
    """A probe's verdict from a finished run's requests."""
    from sim.engine.metrics import request_latencies

    reqs = result.requests
    done = [r for r in reqs if r.finish_s is not None]
    rejected = sum(1 for r in reqs if r.reject_reason is not None)
    in_flight = len(reqs) - len(done) - rejected
    lat = [request_latencies(r) for r in done]
    ttft = _percentile([t for t, _, _ in lat], slo.percentile)
    tpot = _percentile([p for _, p, _ in lat if p is not None], slo.percentile)
    met = sum(1 for t, p, _ in lat if t <= slo.ttft_s and (p is None or p <= slo.tpot_s))
    attained = met / len(reqs) if reqs else 0.0  # a rejected or unfinished request is a miss
    passed = (in_flight == 0 and rejected == 0 and ttft is not None and ttft <= slo.ttft_s
              and (tpot is None or tpot <= slo.tpot_s) and attained >= slo.attainment)
    out_tokens = sum(r.num_output_tokens for r in done)
    return {"rate": rate, "passed": passed, "ttft_s": ttft, "tpot_s": tpot, "attainment": attained,
            "completed": len(done), "rejected": rejected, "in_flight": in_flight,
            "mean_output_tokens": out_tokens / len(done) if done else None,
            "simulated_s": result.end_s}


def probe(data: dict, source: str, rate: float, slo) -> dict:
    """Simulate ``data`` at ``rate`` requests/s and judge it against ``slo``."""
    from sim.config.scenario import parse_scenario
    from sim.engine.simulation import Simulation

    d = copy.deepcopy(data)
    d["workload"]["arrival"]["rate"] = rate
    return judge(Simulation(parse_scenario(d, source)).run(), slo, rate)


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
    while hi["rate"] - lo["rate"] > search.tolerance * lo["rate"]:
        p = evaluate((lo["rate"] + hi["rate"]) / 2)
        probes.append(p)
        if p["passed"]:
            lo = p
        else:
            hi = p
    return lo, probes


def memory_summary(data: dict, source: str) -> dict:
    """The configuration's memory plan (ConfigError when it does not fit)."""
    from sim.config.scenario import parse_scenario
    from sim.engine.parts import build_plan

    _, _, plan = build_plan(parse_scenario(data, source))
    return {"kv_pool_tokens": plan.pool_tokens, "max_full_length_requests": plan.max_full_length_seqs,
            "max_concurrency": plan.max_concurrency, "num_gpu_blocks": plan.num_gpu_blocks,
            "bytes_per_token": plan.bytes_per_token, "weight_bytes_per_gpu": plan.weight_bytes,
            "max_model_len": plan.max_model_len}


def evaluate_config(config, slo, search) -> dict:
    """The record of one configuration; never raises (a crash is an ``error`` record).
    Top-level so a process pool can ship it."""
    record = {"index": config.index, "values": config.values, "gpu": config.gpu,
              "tensor_parallel_size": config.tensor_parallel_size, "seed": config.data.get("seed", 0),
              "status": None, "reason": None, "memory": None, "max_rate": None, "capped": False,
              "at_max_rate": None, "probes": []}
    try:
        record["memory"] = memory_summary(config.data, config.source)
    except ConfigError as exc:
        record.update(status="infeasible", reason=exc.message)
        return record
    try:
        best, probes = search_max_rate(lambda r: probe(config.data, config.source, r, slo), search)
    except Exception as exc:  # noqa: BLE001 -- recorded; the other configurations go on
        record.update(status="error", reason=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        return record
    record["probes"] = probes
    if best is None:
        first = probes[0]
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

"""What ``sim serve --out DIR`` writes when it has drained: the run as ``sim run`` writes one
(summary.json, requests.csv, steps.csv, report.html; several replicas' as a cluster run's:
per-replica entries in summary.json, a ``replica`` column in the CSVs), built from the served
engines' requests and step logs; serve.json: every request accounted for (arrived =
completed + rejected by reason + aborted + in flight), per engine (with its port under
``--replica-ports``) and in total; and arrivals.csv: every request that reached an engine as a
trace (arrival time from the first, prompt and output tokens, full precision, and the
prompts' prefix identity: sim/serve/identity.py), so ``sim run`` replays what the clients
sent (``workload: {trace: {path: arrivals.csv}}``) with the same prefix-cache hits.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from sim.engine.simulation import SimResult
from sim.serve.engine import ABORT_REASON
from sim.serve.identity import arrivals_csv

EXTERNAL_NOTE = ("sim serve --replica-ports: each replica served a port of its own and an external router "
                 "routed the requests (cluster.router was not used)")


def _end(engine) -> float:
    return max(engine.t, engine.frontend.free_at if engine.frontend else 0.0)


def sim_result(engine, end_s: float | None = None) -> SimResult:
    """The served ``engine``'s run as a :class:`SimResult` (what outputs read)."""
    p = engine.parts
    return SimResult(
        scenario=p.sc, plan=p.plan, calibration_name=p.cal.name, calibration_source=str(p.cal.source),
        requests=engine.requests, steps=engine.core.steps, scheduler=engine.scheduler, preemptor=p.preemptor,
        allocator=p.allocator, swap=p.swap, end_s=_end(engine) if end_s is None else end_s,
        calibration_label=p.cal.source_label, profile=p.profile, frontend=engine.frontend,
        kernel_timing=p.cal.kernel_timing, itl=engine.itl)


class _ExternalRouter:
    """Where an external router placed the requests: kvsim's router counted nothing."""

    num_prefix_routed = 0
    num_fallbacks = 0


def cluster_result(served):
    """The served replicas as a cluster run (sim/engine/cluster/simulation.py's ClusterResult):
    every request in arrival order (global ids; a replica's own ids are its rows in order), the
    replica each reached, each replica's run up to the cluster's end."""
    from sim.engine.cluster.simulation import ClusterResult

    engines = served.engines
    end = max(_end(e) for e in engines)
    order = sorted((r.arrival_s, i, k) for i, e in enumerate(engines) for k, r in enumerate(e.requests))
    requests, replica_of = [], []
    for gid, (_, i, k) in enumerate(order):
        req = copy.copy(engines[i].requests[k])  # (a live one stays as its engine holds it)
        req.request_id = gid
        requests.append(req)
        replica_of.append(i)
    router = _ExternalRouter() if served.external else served.server.router
    return ClusterResult(engines[0].parts.sc, requests, replica_of, [sim_result(e, end) for e in engines],
                         router, end_s=end)


def accounting(served) -> dict:
    """serve.json: the requests of every engine, and all of them together."""
    engines = served.engines
    rows = []
    for i, e in enumerate(engines):
        s = e.stats
        rejects = {k: v for k, v in sorted(s.rejects.items()) if k != ABORT_REASON}
        rows.append({"arrived": s.arrived, "completed": s.completed, "rejected": sum(rejects.values()),
                     "rejected_by_reason": rejects, "aborted": s.rejects.get(ABORT_REASON, 0),
                     "in_flight": e.in_flight(), "steps": s.steps, "simulated_s": e.t,
                     "max_lag_s": e.lag_s,
                     "first_token_write_late_s": {
                         "mean": s.first_late_sum / s.first_late_n if s.first_late_n else 0.0,
                         "max": s.first_late_max, "streams": s.first_late_n}})
        if served.external and served.ports:
            rows[-1]["port"] = served.ports[i]
    total = {k: sum(r[k] for r in rows) for k in ("arrived", "completed", "rejected", "aborted", "in_flight")}
    clock = engines[0].clock
    # simulated time t was at monotonic (time.monotonic()) clock_t0 + t / time_scale
    return {"total": total, "engines": rows, "time_scale": clock.scale, "clock_t0_monotonic": clock.t0}


def write_served(out_dir: Path, served, stale, report: bool) -> None:
    from sim.engine.logs.metrics import summarize
    from sim.outputs.files import write_outputs, write_run

    engines = served.engines
    if len(engines) == 1:
        result = sim_result(engines[0])
        summary = summarize(result)
    else:
        from sim.engine.cluster.simulation import summarize_cluster

        result = cluster_result(served)
        summary = summarize_cluster(result)
        if served.external:
            summary["notes"].append(EXTERNAL_NOTE)
    html = None
    if report:
        from sim.outputs.report import render_report

        html = render_report(result, summary, engines[0].parts.cal)
    write_run(out_dir, summary, result, html, stale)
    files = {"serve.json": json.dumps(accounting(served), indent=2) + "\n"}
    if served.identity.rows:  # (a trace needs a row)
        files["arrivals.csv"] = arrivals_csv(served.identity)
    write_outputs(out_dir, files)

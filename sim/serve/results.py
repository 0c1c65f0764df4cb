"""What ``sim serve --out DIR`` writes when it has drained: each engine's run as ``sim run``
writes one (summary.json, requests.csv, steps.csv, report.html; a replica's in
``replica-<i>/``), built from the served engine's requests and step log, and serve.json: every
request accounted for (arrived = completed + rejected by reason + aborted + in flight), and
arrivals.csv: every request that reached an engine as a trace (arrival time from the first,
prompt and output tokens; full precision), so ``sim run`` can replay what the clients sent
(``workload: {trace: {path: arrivals.csv}}``; prompts' shared prefixes are not in it).
"""

from __future__ import annotations

import json
from pathlib import Path

from sim.engine.simulation import SimResult
from sim.serve.engine import ABORT_REASON


def sim_result(engine) -> SimResult:
    """The served ``engine``'s run as a :class:`SimResult` (what outputs read)."""
    p = engine.parts
    return SimResult(
        scenario=p.sc, plan=p.plan, calibration_name=p.cal.name, calibration_source=str(p.cal.source),
        requests=engine.requests, steps=engine.core.steps, scheduler=engine.scheduler, preemptor=p.preemptor,
        allocator=p.allocator, swap=p.swap, end_s=max(engine.t, engine.frontend.free_at if engine.frontend else 0.0),
        calibration_label=p.cal.source_label, profile=p.profile, frontend=engine.frontend,
        kernel_timing=p.cal.kernel_timing, itl=engine.itl)


def accounting(engines: list) -> dict:
    """serve.json: the requests of every engine, and all of them together."""
    rows = []
    for e in engines:
        s = e.stats
        rejects = {k: v for k, v in sorted(s.rejects.items()) if k != ABORT_REASON}
        rows.append({"arrived": s.arrived, "completed": s.completed, "rejected": sum(rejects.values()),
                     "rejected_by_reason": rejects, "aborted": s.rejects.get(ABORT_REASON, 0),
                     "in_flight": e.in_flight(), "steps": s.steps, "simulated_s": e.t,
                     "max_lag_s": e.lag_s,
                     "first_token_write_late_s": {
                         "mean": s.first_late_sum / s.first_late_n if s.first_late_n else 0.0,
                         "max": s.first_late_max, "streams": s.first_late_n}})
    total = {k: sum(r[k] for r in rows) for k in ("arrived", "completed", "rejected", "aborted", "in_flight")}
    clock = engines[0].clock
    # simulated time t was at monotonic (time.monotonic()) clock_t0 + t / time_scale
    return {"total": total, "engines": rows, "time_scale": clock.scale, "clock_t0_monotonic": clock.t0}


def arrivals_csv(engines: list) -> str:
    """The served requests as a trace, in arrival order."""
    rows = sorted((r.arrival_s, r.num_prompt_tokens, r.num_output_tokens) for e in engines for r in e.requests)
    t0 = rows[0][0] if rows else 0.0
    return "arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{a - t0!r},{p},{o}\n" for a, p, o in rows)


def write_served(out_dir: Path, engines: list, stale, report: bool) -> None:
    from sim.engine.logs.metrics import summarize
    from sim.outputs.files import write_outputs, write_run

    for i, e in enumerate(engines):
        folder = out_dir if len(engines) == 1 else out_dir / f"replica-{i}"
        result = sim_result(e)
        summary = summarize(result)
        write_run(folder, summary, result, None, stale if folder == out_dir else ())
        if report:
            from sim.outputs.report import render_report

            write_outputs(folder, {"report.html": render_report(result, summary, e.parts.cal)})
    files = {"serve.json": json.dumps(accounting(engines), indent=2) + "\n"}
    if any(len(e.requests) for e in engines):  # (a trace needs a row)
        files["arrivals.csv"] = arrivals_csv(engines)
    write_outputs(out_dir, files)

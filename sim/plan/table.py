"""The end of ``sim plan`` in the terminal: the ranked configurations, then one reason per
top configuration, then the counts and where the files are."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.plan.spec import PlanSpec
from sim.plan.ties import short_reason, tie_lines
from sim.plan.unit import UNIT_HEAD, unit_cells


def _money(v) -> str:
    return "-" if v is None else f"{v:,.2f}"


def print_plan(spec: PlanSpec, ranked: list[dict], out_dir: Path, wall_s: float, run=None) -> None:
    """``run``: the PlanRun (sim/plan/runner.py), for the searched / reused and probe counts."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 160))
    q = f"p{spec.slo.percentile:g}"
    t = Table(title=f"plan {spec.name}: {spec.target_rate:g} req/s, {q} TTFT <= {spec.slo.ttft_s:g} s, "
                    f"{q} TPOT <= {spec.slo.tpot_s * 1e3:g} ms, attainment >= {spec.slo.attainment:.0%}",
              header_style="bold")
    t.add_column("#", justify="right")
    # a plan with units shows whole cluster mappings as the unit columns (router, replicas, P:D)
    keys = [k for k in spec.keys if not (spec.clustered and k in ("cluster", "cluster.disaggregation"))]
    for key in keys:
        t.add_column(key.rsplit(".", 1)[-1], no_wrap=True)
    units = UNIT_HEAD if spec.clustered else ()
    for col in ("status", "max req/s", f"{q} TTFT ms", f"{q} TPOT ms", *units, "replicas", "GPUs", "USD/h",
                "USD/M out tok"):
        t.add_column(col, justify="right" if col != "status" else "left", no_wrap=True)
    reasons = [short_reason(r, spec) for r in ranked]
    if any(reasons):  # why a configuration is not feasible, short (plan.csv's reason column: whole)
        t.add_column("reason", overflow="fold", min_width=24)
    for r, reason in zip(ranked, reasons):
        at = r["at_max_rate"] or {}
        rate = "-" if r["max_rate"] is None else f"{'>=' if r['capped'] else ''}{r['max_rate']:.2f}"
        ttft = "-" if at.get("ttft_s") is None else f"{at['ttft_s'] * 1e3:.0f}"
        tpot = "-" if at.get("tpot_s") is None else f"{at['tpot_s'] * 1e3:.0f}"
        t.add_row(str(r["rank"] or "-"), *(str(r["values"][k]) for k in keys), r["status"], rate, ttft, tpot,
                  *(unit_cells(r) if spec.clustered else ()),
                  str(r["replicas"] or "-"), str(r["gpus"] or "-"), _money(r["cost_per_hour"]),
                  _money(r["cost_per_million_output_tokens"]), *([reason] if any(reasons) else []))
    console.print(t)
    feasible = [r for r in ranked if r["status"] == "feasible"]
    for r in feasible[:3]:
        console.print(f"#{r['rank']}: {r['why']}", highlight=False, soft_wrap=True)
    for line in tie_lines(ranked, spec.target_rate):
        console.print(line, highlight=False, soft_wrap=True)
    counts = {s: sum(1 for r in ranked if r["status"] == s)
              for s in ("feasible", "slo-unreachable", "infeasible", "error")}
    console.print(f"configurations {len(ranked)}: " + ", ".join(f"{s} {n}" for s, n in counts.items()),
                  highlight=False)
    if run is not None:
        st = run.stats
        reuse = (f"; bracket reuse along {st['reuse_key']}: {st['warm_started']} warm starts, about "
                 f"{st['saved_estimate']} probes saved" if st["reuse_key"] else "")
        if st.get("warm_from_one_replica"):
            reuse += (f"; {st['warm_from_one_replica']} units started at N x their one-replica twin's max rate")
        reused = f", reused {run.reused} (--resume)" if run.reused else ""
        console.print(f"searched {run.computed}{reused}; probes run {st['run']}{reuse}", highlight=False)
        if st["below_smaller_pool"]:
            console.print(f"a larger pool sustained less than its smaller neighbour in configurations "
                          f"{', '.join(map(str, st['below_smaller_pool']))} (plan.json probes.below_smaller_pool)",
                          highlight=False)
    if not feasible:
        console.print("no configuration meets the SLO: see the reason column of plan.csv", highlight=False)
    console.print(f"wrote {out_dir}/ (plan.json, plan.csv, plan.html) in {wall_s:.1f} s", highlight=False)

"""Terminal output at the end of ``sim sweep``: the best few points by a key metric in a
table (the style of ``sim run``'s, sim/outputs/table.py), then how many points ran, failed
or were reused, and where the files are."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.engine.logs.metrics import STAT_KEYS, stat_label
from sim.errors import ConfigError
from sim.sweep.grid import SweepPlan
from sim.sweep.identical import identical_groups
from sim.sweep.runner import SweepStats, results_rows

#: Ranking metrics, the first present in the ok points wins (all: higher is better).
RANK_BY = (("goodput_requests_per_s", "goodput (req/s)"), ("throughput.requests_per_s", "throughput (req/s)"))
#: Columns shown for each best point: (results.csv column, header, scale).
SHOWN = (("goodput_requests_per_s", "goodput req/s", 1.0), ("throughput.requests_per_s", "req/s", 1.0),
         ("ttft_s.p99", "TTFT p99 ms", 1e3), ("e2e_s.p90", "E2E p90 ms", 1e3))

_LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E"))
#: What ``--sort-by`` ranks by: results.csv column -> (header, scale (None: a share), higher is better).
SORT_METRICS = {
    "goodput_requests_per_s": ("goodput req/s", 1.0, True),
    "throughput.requests_per_s": ("req/s", 1.0, True),
    "throughput.output_tokens_per_s": ("output tok/s", 1.0, True),
    "throughput.total_tokens_per_s": ("total tok/s", 1.0, True),
    "slo.attained_fraction": ("SLO met", None, True),
    **{f"{key}.{q}": (f"{name} {stat_label(q)} ms", 1e3, False) for key, name in _LATENCIES for q in STAT_KEYS},
    "kv.prefix_cache_hit_rate": ("prefix hits", None, True),
    "kv.mean_allocated_unused_fraction": ("KV unused", None, False),
    "kv.peak_used_fraction": ("KV peak", None, False),
    "requests.rejected": ("rejected", 1.0, False),
    "preemptions.recompute": ("recomputes", 1.0, False),
    "preemptions.swap": ("swaps", 1.0, False),
}


def sort_metric_names() -> str:
    """The ``--sort-by`` values, in one line (the latencies' 24 folded into one pattern)."""
    plain = [k for k in SORT_METRICS if not k.startswith(tuple(f"{key}." for key, _ in _LATENCIES))]
    lat = "{" + ",".join(key for key, _ in _LATENCIES) + "}.{" + ",".join(STAT_KEYS) + "}"
    return ", ".join([*plain[:5], lat, *plain[5:]])


def check_sort_by(name: str | None) -> None:
    """``--sort-by``: a metric of :data:`SORT_METRICS` (a ConfigError naming the flag otherwise)."""
    if name is not None and name not in SORT_METRICS:
        raise ConfigError("<cli>", "--sort-by", f"got {name!r}; allowed: {sort_metric_names()}")


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _fmt(v, scale) -> str:
    v = _number(v)
    if v is None:
        return "-"
    return f"{v:.1%}" if scale is None else f"{v * scale:,.2f}"


def _label(v) -> str:
    return "true" if v is True else "false" if v is False else str(v)


def best_points(plan: SweepPlan, stats: SweepStats, top: int = 3,
                sort_by: str | None = None) -> tuple[str | None, str, list[dict]]:
    """(metric, its label, the ``top`` ok rows best by it, in grid order on ties). ``sort_by``: a
    metric of :data:`SORT_METRICS` (lowest first where lower is better); by default goodput,
    else throughput (highest first)."""
    _, rows = results_rows(plan, stats.records)
    rows = [{**r, "#": i + 1} for i, r in enumerate(rows)]  # results.csv's row number
    # points identical to an earlier one (sim/sweep/identical.py) are ranked once, as their first
    ok = [r for r in rows if r["status"] == "ok" and r.get("identical_to") in (None, r["point_id"])]
    if sort_by is not None:
        header, _, higher = SORT_METRICS[sort_by]
        ranked = [r for r in ok if _number(r.get(sort_by)) is not None]
        sign = -1.0 if higher else 1.0
        label = f"{header} ({'higher' if higher else 'lower'} is better)"
        return sort_by, label, sorted(ranked, key=lambda r: sign * _number(r[sort_by]))[:top]
    for metric, label in RANK_BY:
        ranked = [r for r in ok if _number(r.get(metric)) is not None]
        if ranked:
            return metric, label, sorted(ranked, key=lambda r: -_number(r[metric]))[:top]
    return None, "", []


def print_sweep_summary(plan: SweepPlan, stats: SweepStats, out_dir: Path, top: int = 3,
                        sort_by: str | None = None) -> None:
    console = Console()
    if not console.is_terminal:  # a pipe or a file: no need to squeeze into 80 columns
        console = Console(width=max(console.width, 160))
    metric, label, best = best_points(plan, stats, top, sort_by)
    groups = identical_groups(plan, stats.records)
    mates = {g.points[0] + 1: ", ".join(str(i + 1) for i in g.points[1:]) for g in groups}
    if best:
        once = " (identical points once)" if groups else ""
        t = Table(title=f"sweep: the best {len(best)} of {stats.num_points} points by {label}{once}",
                  show_header=True, header_style="bold")
        t.add_column("#", justify="right")  # the point's row in results.csv
        for key in plan.keys:  # the key's last part: the full names are in results.csv
            t.add_column(key.rsplit(".", 1)[-1], no_wrap=True)
        shown = [s for s in SHOWN if any(s[0] in r for r in best)]
        if sort_by is not None and sort_by not in {c for c, _, _ in shown}:  # the ranked column, first
            shown.insert(0, (sort_by, *SORT_METRICS[sort_by][:2]))
        for _, header, _ in shown:
            t.add_column(header, justify="right", no_wrap=True)
        same = any(row["#"] in mates for row in best)
        if same:
            t.add_column("identical: #", no_wrap=True)
        for row in best:
            t.add_row(str(row["#"]), *(_label(row[k]) for k in plan.keys),
                      *(_fmt(row.get(c), scale) for c, _, scale in shown),
                      *([mates.get(row["#"], "")] if same else []))
        console.print(t)
    ok = stats.num_points - stats.num_invalid - stats.num_errors
    lines = [
        f"points       {stats.num_points}: ok {ok}, invalid {stats.num_invalid}, error {stats.num_errors} "
        f"(computed now {stats.num_computed}, reused {stats.num_reused})",
        f"wrote        {out_dir}/ (results.csv, whatif.html, points/: one file per point)",
    ]
    if not best and ok and sort_by is not None:
        lines.insert(1, f"best         no point that finished ok has a number in {sort_by}")
    elif not best:
        lines.insert(1, "best         no point finished ok: see the error column of results.csv")
    records = [stats.records[p.point_id] for p in plan.points if p.point_id in stats.records]
    failed = [r for r in records if r.get("status") != "ok" and r.get("error")]
    if failed:
        first = str(failed[0]["error"]).splitlines()[0]
        lines.insert(1, f"failed       e.g. {', '.join(f'{k}={_label(v)}' for k, v in failed[0]['values'].items())}: {first}")
    lines[1:1] = identical_lines(groups)
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


#: At most this many identical groups get a line of their own in the terminal.
MAX_GROUP_LINES = 8


def identical_lines(groups) -> list[str]:
    """One line per group of identical points (the first MAX_GROUP_LINES), then how many more."""
    lines = [f"identical    points {g.numbers()}: {g.reason}" for g in groups[:MAX_GROUP_LINES]]
    if len(groups) > MAX_GROUP_LINES:
        lines.append(f"identical    and {len(groups) - MAX_GROUP_LINES} more groups: see results.csv's "
                     "identical_to and identical_note columns")
    return lines

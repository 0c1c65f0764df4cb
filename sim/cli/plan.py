"""The command line of ``sim plan`` (parse, validate, search, write).

The parser imports nothing heavy: building it must stay cheap for every ``sim`` call.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sim.errors import ConfigError

PLAN_FILES = ("plan.json", "plan.csv", "plan.html")


def add_plan_parser(sub) -> None:
    p = sub.add_parser(
        "plan", help="capacity planning: the max rate under an SLO, replicas, GPUs and cost per configuration",
        description="For every configuration of the plan's space: the memory plan, the highest arrival rate "
                    "that meets the SLO (bracket and bisect over simulated probes), the replicas and GPUs the "
                    "target rate needs and their cost. Writes plan.json, plan.csv and plan.html.")
    p.add_argument("plan", help="plan YAML file (see README.md, Capacity planning)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="configurations searched in parallel (default: the CPU count)")
    p.add_argument("--out", default=None, help="output folder (default: plans/<plan name>)")
    p.add_argument("--force", action="store_true", help="replace an earlier plan's files in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")


def run_plan_command(args) -> int:
    import json

    from sim.outputs.files import prepare_out_dir, safe_name, write_atomic
    from sim.plan.page import render_plan_page
    from sim.plan.results import finish, plan_csv, plan_document
    from sim.plan.runner import run_configs
    from sim.plan.spec import load_plan

    if args.workers < 1:
        raise ConfigError("--workers", str(args.workers), "must be at least 1")
    spec = load_plan(args.plan)
    out_dir = Path(args.out) if args.out else Path("plans") / safe_name(spec.name, "plan")
    prepare_out_dir(out_dir, PLAN_FILES, force=args.force, known=PLAN_FILES)  # before minutes of simulation
    show = not args.quiet and sys.stderr.isatty()
    t0 = time.perf_counter()
    with _progress(show, len(spec.configs)) as progress:
        records = run_configs(spec, args.workers, on_done=progress)
    wall = time.perf_counter() - t0
    ranked = finish(spec, records)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / "plan.json", json.dumps(plan_document(spec, ranked, wall), indent=1) + "\n")
    write_atomic(out_dir / "plan.csv", plan_csv(spec, ranked))
    write_atomic(out_dir / "plan.html", render_plan_page(spec, ranked))
    if not args.quiet:
        from sim.plan.table import print_plan

        print_plan(spec, ranked, out_dir, wall)
    return 0


class _progress:
    """A rich progress bar on stderr (a no-op when not shown)."""

    def __init__(self, show: bool, total: int) -> None:
        self.show, self.total, self.bar = show, total, None

    def __enter__(self):
        if not self.show:
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("plan"), BarColumn(), MofNCompleteColumn(), TextColumn("configurations"),
                            TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task("plan", total=self.total)
        return lambda record: self.bar.update(task, advance=1)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

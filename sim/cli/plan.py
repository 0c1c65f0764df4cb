"""The command line of ``sim plan`` (parse, validate, search, write).

The parser imports nothing heavy: building it must stay cheap for every ``sim`` call.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sim.errors import ConfigError
from sim.outputs.plotlyjs import add_plotly_flag

PLAN_FILES = ("plan.json", "plan.csv", "plan.html", "plotly.min.js")



def add_plan_parser(sub) -> None:
    p = sub.add_parser(
        "plan", help="capacity planning: the max rate under an SLO, replicas, GPUs and cost per configuration",
        description="For every configuration of the plan's space: the memory plan, the highest arrival rate "
                    "that meets the SLO (bracket and bisect over simulated probes), the replicas and GPUs the "
                    "target rate needs and their cost. Writes plan.json, plan.csv and plan.html.")
    p.add_argument("plan", help="plan YAML file (see docs/guides/capacity-planning.md)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="configurations searched in parallel (default: the CPU count)")
    p.add_argument("--out", default=None, help="output folder (default: plans/<plan name>)")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier plan's files in --out, its finished configurations too")
    p.add_argument("--resume", action="store_true",
                   help="reuse the finished configurations in --out (configs/) and search only the others")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local process pool (default) or Ray")
    p.add_argument("--ray-address", default=None, help="a Ray cluster's address (default: start a local Ray)")
    p.add_argument("--ray-timeout", type=float, default=None, metavar="SECONDS",
                   help="give up reaching Ray after this long (default: 30)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    add_plotly_flag(p, "plan.html")


def run_plan_command(args) -> int:
    import json

    from sim.outputs.files import prepare_out_dir, refuse_linked_subfolder, remove_files, safe_name, write_atomic
    from sim.plan.page import render_plan_page
    from sim.plan.points import configs_dir, fingerprint, load_points, point_files, remove_points
    from sim.plan.results import finish, plan_csv, plan_document
    from sim.plan.runner import run_plan
    from sim.plan.spec import load_plan
    from sim.sweep.executors import ExecutorKind, Terminated, make_executor

    if args.resume and args.force:
        raise ConfigError("--force", "--resume", "give one: --resume continues the plan in --out, --force "
                          "starts it over")
    executor = make_executor(ExecutorKind(args.executor), args.workers, args.ray_address, args.ray_timeout)
    from sim.config.shipped import resolve_scenario_path

    spec = load_plan(str(resolve_scenario_path(args.plan)))  # a shipped plan (plan-chatbot) by name
    out_dir = Path(args.out) if args.out else Path("plans") / safe_name(spec.name, "plan")
    # before minutes of simulation: --resume rewrites the plan's own files; an earlier plan's
    # plotly.min.js goes once this one is written unless --plotly folder writes it again
    writes = [f for f in PLAN_FILES if f != "plotly.min.js" or args.plotly == "folder"]
    stale = prepare_out_dir(out_dir, writes, force=args.force or args.resume, known=PLAN_FILES)
    refuse_linked_subfolder(configs_dir(out_dir))
    if point_files(out_dir) and not (args.resume or args.force):
        raise ConfigError(str(configs_dir(out_dir)), "--out", "already holds a plan's finished configurations; "
                          "pass --resume to continue it, --force to start over, or another --out")
    # --resume: a stale or malformed point file is one error line now
    already = len(load_points(out_dir, spec, fingerprint(spec))) if args.resume else 0
    show = not args.quiet and sys.stderr.isatty()
    if not args.quiet:
        from sim.plan.search import workload_note

        note = workload_note(spec, len(spec.configs) - already, args.workers)
        if note:
            print(note, file=sys.stderr)
    executor.start()  # Ray: reach the cluster (bounded by --ray-timeout) before writing anything
    t0 = time.perf_counter()
    try:
        if args.force:
            remove_points(out_dir)
        with _progress(show, len(spec.configs), already) as progress:
            run = run_plan(spec, executor, out_dir, resume=args.resume, on_done=progress)
    except KeyboardInterrupt as exc:
        print(f"error: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}; finished "
              f"configurations are kept in {configs_dir(out_dir)}; rerun with --resume to continue", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        executor.close()
    wall = time.perf_counter() - t0
    ranked = finish(spec, run.records)
    write_atomic(out_dir / "plan.json", json.dumps(plan_document(spec, ranked, wall, run.stats), indent=1) + "\n")
    write_atomic(out_dir / "plan.csv", plan_csv(spec, ranked))
    from sim.outputs.plotlyjs import include

    write_atomic(out_dir / "plan.html", render_plan_page(spec, ranked, run.stats, include(args.plotly, out_dir)))
    remove_files(stale)
    if not args.quiet:
        from sim.plan.table import print_plan

        print_plan(spec, ranked, out_dir, wall, run)
    return 0


class _progress:
    """A rich progress bar on stderr (a no-op when not shown)."""

    def __init__(self, show: bool, total: int, already: int = 0) -> None:
        self.show, self.total, self.already, self.bar = show, total, already, None

    def __enter__(self):
        if not self.show:
            return None
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.bar = Progress(TextColumn("plan"), BarColumn(), MofNCompleteColumn(), TextColumn("configurations"),
                            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                            console=Console(stderr=True), transient=True)
        self.bar.__enter__()
        task = self.bar.add_task("plan", total=self.total, completed=self.already)
        return lambda record: self.bar.update(task, advance=1)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

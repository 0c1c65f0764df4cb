"""The command lines of ``sim sweep`` and ``sim compare`` (parse, validate, run, write).

Parsers import nothing heavy: building them must stay cheap for every ``sim`` call.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from sim.errors import ConfigError
from sim.outputs.plotlyjs import add_plotly_flag


def add_sweep_parser(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a scenario over a grid of overrides; write results.csv and whatif.html",
        description="Run the cartesian product of the --grid values. A key or value that fails in "
                    "every point stops the sweep before anything runs (exit 2); a combination that "
                    "fails is recorded in results.csv with its error and the sweep goes on.")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--grid", action="append", default=[], metavar="KEY.PATH=V1,V2,...",
                   help="a key and its values, e.g. --grid kv.block_size=8,16,32 (repeatable)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario key in every point (repeatable)")
    p.add_argument("--out", default=None, help="output folder (default: sweeps/<scenario name>)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="parallel points (default: the CPU count)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the finished points in --out and run only the others")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local process pool (default) or Ray")
    p.add_argument("--ray-address", default=None,
                   help="a Ray cluster's address (default: start a local Ray)")
    p.add_argument("--ray-timeout", type=float, default=None, metavar="SECONDS",
                   help="give up reaching Ray after this long (default: 30)")
    p.add_argument("--sort-by", "--metric", dest="sort_by", default=None, metavar="COLUMN",
                   help="rank the terminal table's best points by this results.csv column, e.g. "
                        "ttft_s.p95 (lowest first) or throughput.output_tokens_per_s (highest first); "
                        "default: goodput, else throughput")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary line")
    add_plotly_flag(p, "whatif.html")


def add_compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="overlay finished runs; write compare.html and print a table")
    p.add_argument("runs", nargs="+", metavar="DIR", help="folders written by `sim run`")
    p.add_argument("--out", default="compare.html", help="HTML file to write (default: compare.html)")
    p.add_argument("--quiet", action="store_true", help="no table")
    add_plotly_flag(p, "compare.html")
    p.add_argument("--force", action="store_true",
                   help="overwrite --out even when it is not a page written by sim compare")


def check_compare_out(args) -> None:
    """``sim compare --out``: a file (not a folder) in an existing, writable folder; an
    existing file is replaced only when it is an earlier compare page, or with --force."""
    from sim.outputs.files import check_writable

    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(args.out, "--out", "is a folder; give the HTML file to write, e.g. DIR/compare.html")
    if not out.parent.is_dir():
        raise ConfigError(args.out, "--out", "its folder does not exist")
    check_writable(out)
    if out.exists() and not args.force and not _is_compare_page(out):
        raise ConfigError(args.out, "--out", "is an existing file not written by sim compare; "
                          "pass --force to overwrite it, or choose another file")


def _is_compare_page(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith("<!DOCTYPE html>") and "<title>kvsim compare" in head


@contextmanager
def _progress(show: bool, total: int, already: int):
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("points"),
               TextColumn("{task.fields[errors]} failed"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("sweep", total=total, completed=already, errors=0)
        failed = [0]

        def update(record: dict) -> None:
            failed[0] += record["status"] != "ok"
            bar.update(task, advance=1, errors=failed[0])

        yield update


def run_sweep_command(args) -> int:
    from sim.outputs.files import check_writable, refuse_linked_subfolder, safe_name
    from sim.sweep.executors import ExecutorKind, Terminated, make_executor
    from sim.sweep.grid import plan_sweep
    from sim.sweep.runner import load_records, point_files, points_dir, run_sweep
    from sim.sweep.table import check_sort_by
    from sim.config.shipped import resolve_scenario_path

    check_sort_by(args.sort_by)  # before anything runs
    executor = make_executor(ExecutorKind(args.executor), args.workers, args.ray_address, args.ray_timeout)
    args.scenario = str(resolve_scenario_path(args.scenario))  # a shipped scenario by name
    plan = plan_sweep(args.scenario, args.grid, args.overrides)
    name = plan.points[0].data.get("name") or Path(args.scenario).stem
    out_dir = Path(args.out) if args.out else Path("sweeps") / safe_name(str(name))
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(str(out_dir), "--out", "is an existing file; give a folder for the sweep")
    refuse_linked_subfolder(points_dir(out_dir))
    check_writable(points_dir(out_dir))
    if not args.resume and point_files(out_dir):
        raise ConfigError(str(points_dir(out_dir)), "--out",
                          "already holds a sweep's points; pass --resume to continue it, or another --out")
    # --resume: every point file is checked (one error line for a malformed one) before anything runs
    done = len(set(load_records(out_dir)) & {p.point_id for p in plan.points}) if args.resume else 0
    show = not args.quiet and sys.stderr.isatty()
    executor.start()  # Ray: reach the cluster (bounded by --ray-timeout) before writing anything
    try:
        with _progress(show, len(plan.points), done) as progress:
            stats = run_sweep(plan, out_dir, executor, resume=args.resume, on_done=progress, plotly=args.plotly)
    except KeyboardInterrupt as exc:
        print(f"error: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}; finished points "
              f"are kept in {points_dir(out_dir)}; rerun with --resume to continue", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        executor.close()
    if not args.quiet:
        from sim.sweep.table import print_sweep_summary

        print_sweep_summary(plan, stats, out_dir, sort_by=args.sort_by)
    return 0

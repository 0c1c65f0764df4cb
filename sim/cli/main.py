"""``sim``: the command line. Thin: parse, load and validate, run, write.

Bad input of any kind ends in one line ``error: <file>: <key.path>: <what is allowed>``
on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sim.errors import OneLineParser, cli_exit_code
from sim.outputs.plotlyjs import add_plotly_flag


def _add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="simulate a scenario and write summary, CSVs and a report")
    p.add_argument("scenario", help="scenario YAML file, or a shipped scenario by name (sim scenarios lists them)")
    p.add_argument("--out", default=None, help="output folder (default: runs/<scenario name>)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario key, e.g. --set kv.block_size=32 (repeatable)")
    p.add_argument("--no-report", action="store_true", help="skip report.html")
    add_plotly_flag(p, "report.html")
    p.add_argument("--steps", choices=("full", "sampled", "none"), default="full",
                   help="steps.csv: every step (default), at most 100,000 evenly spaced steps "
                        "(sampled), or none; summary.json and report.html use every step either way")
    p.add_argument("--schedule", action="store_true",
                   help="also write schedule.jsonl: every step's decisions (requests and tokens "
                        "scheduled, preemptions, finishes, prefix-cache hits, free blocks), to diff "
                        "against a real engine's log (docs/CONFORMANCE.md); one engine only")
    p.add_argument("--validate-every", type=int, default=None, metavar="N",
                   help="also run every Nth engine step's batch on the real engine (realengine/) and time "
                        "it; the simulated clock is not changed; summary.json and report.html get a "
                        "validation section (docs/guides/validate.md); one engine only; needs torch")
    p.add_argument("--validate-device", choices=("cpu", "cuda"), default=None,
                   help="where --validate-every runs the batches: cpu (torch references, default) or cuda (Triton)")
    p.add_argument("--validate-budget", type=float, default=None, metavar="SECONDS",
                   help="wall time --validate-every may spend executing samples (default 300); "
                        "past it, steps are counted as skipped")
    p.add_argument("--correct", action="store_true",
                   help="with --validate-every: rescale the cost model's step times by a bounded [0.5, 2], "
                        "smoothed factor per step kind learnt from the samples (changes the simulated clock)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.add_argument("--json", action="store_true", help="print summary.json to stdout")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier run in --out (its files this run does not write are removed)")


def _adders() -> dict:
    """Each subcommand's name -> the function that registers its parser (imported on call)."""
    def catalog(sub):
        from sim.cli.catalog import add_catalog_parsers
        add_catalog_parsers(sub)

    def kv(sub):
        from sim.cli.kv import add_kv_parser
        add_kv_parser(sub)

    def plan(sub):
        from sim.cli.plan import add_plan_parser
        add_plan_parser(sub)

    def serve(sub):
        from sim.cli.serve import add_serve_parser
        add_serve_parser(sub)

    def sweep(sub):
        from sim.cli.sweep import add_sweep_parser
        add_sweep_parser(sub)

    def compare(sub):
        from sim.cli.sweep import add_compare_parser
        add_compare_parser(sub)

    def validate(sub):
        from sim.cli.validate import add_validate_parser
        add_validate_parser(sub)

    return {"run": _add_run_parser, "kv": kv, "sweep": sweep, "compare": compare, "plan": plan,
            "validate": validate, "serve": serve, "models": catalog, "gpus": catalog, "scenarios": catalog}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``sim`` parser. ``command``: a known subcommand's name registers that one only (the
    same parser for its arguments, without importing the other commands' modules at start-up:
    ``sim run`` does not need ``sim kv``'s or the catalog's); otherwise every subcommand."""
    adders = _adders()
    parser = OneLineParser(  # an argparse error is one `error:` line too, not a usage dump
        prog="sim", description="kvsim: what will my LLM server do with its GPU memory?")
    sub = parser.add_subparsers(dest="command", required=True)
    if command in adders:
        adders[command](sub)
        return parser
    for add in dict.fromkeys(adders.values()):  # each once (the catalog adds its three), in order
        add(sub)
    return parser


def _check_footprint(sc, quiet: bool) -> tuple:
    """Refuse a run past this machine's memory; say so when it takes most of it (footprint.py).
    Returns ``build_plan(sc)`` (model, calibration, memory plan): the run is built on it."""
    from sim.engine.footprint import check_footprint
    from sim.engine.parts import build_plan

    from sim.engine.host_memory import check_host_memory

    planned = build_plan(sc)
    plan = planned[2]
    for warning in (check_footprint(sc, plan.num_gpu_blocks), check_host_memory(sc, plan.bytes_per_block, plan.block_size)):
        if warning and not quiet:
            print(warning, file=sys.stderr)
    return planned


def _check_validate_flags(args, sc) -> None:
    """--validate-every's flags: one line and exit 2 for a bad value or combination."""
    from sim.errors import ConfigError

    if args.validate_every is None:
        for flag, given in (("--correct", args.correct), ("--validate-budget", args.validate_budget is not None),
                            ("--validate-device", args.validate_device is not None)):
            if given:
                raise ConfigError("<cli>", flag, "applies with --validate-every N only")
        return
    args.validate_device = args.validate_device or "cpu"
    args.validate_budget = 300.0 if args.validate_budget is None else args.validate_budget
    if args.validate_every < 1:
        raise ConfigError("<cli>", "--validate-every", f"got {args.validate_every}; allowed: an integer >= 1")
    if not args.validate_budget > 0 or args.validate_budget == float("inf"):
        raise ConfigError("<cli>", "--validate-budget", f"got {args.validate_budget}; allowed: seconds > 0")
    if sc.cluster.num_replicas > 1 or sc.engine.pipeline_parallel_size > 1:
        key = "cluster.num_replicas" if sc.cluster.num_replicas > 1 else "engine.pipeline_parallel_size"
        raise ConfigError(sc.source_path, key, "--validate-every runs one engine's steps: set it to 1")


def _run(args) -> int:
    from sim.engine.simulation import Simulation
    from sim.engine.logs.metrics import summarize
    from sim.outputs.files import prepare_out_dir, run_files, safe_name, write_outputs, write_run
    from sim.config.scenario import load_scenario
    from sim.outputs.table import print_summary, progress_bar

    sc = load_scenario(args.scenario, args.overrides)
    out_dir = Path(args.out) if args.out else Path("runs") / safe_name(sc.name)
    writes = run_files(args.steps, report=not args.no_report, schedule=args.schedule,
                       plotly_copy=args.plotly == "folder" and not args.no_report)
    cluster = sc.cluster.num_replicas > 1  # replicas behind a router (sim/engine/cluster/simulation.py)
    pipeline = sc.engine.pipeline_parallel_size > 1  # stages of layers (sim/engine/pipeline/simulation.py, #15)
    if args.schedule and (cluster or pipeline):
        from sim.errors import ConfigError

        key = "engine.pipeline_parallel_size" if pipeline else "cluster.num_replicas"
        raise ConfigError(sc.source_path, key, "--schedule records one engine's steps: set it to 1 "
                          "(one replica of one pipeline stage) to write schedule.jsonl")
    _check_validate_flags(args, sc)
    stale = prepare_out_dir(out_dir, writes, force=args.force)  # before minutes of simulation
    planned = _check_footprint(sc, args.quiet)  # the memory plan, made once for both
    validator = None
    if args.validate_every is not None:
        from validation.inrun import start

        validator, setup = start(sc, args.validate_device, args.validate_every, args.validate_budget, args.correct)
    if pipeline:
        from sim.engine.pipeline.simulation import PipelineSimulation
        from sim.engine.pipeline.summary import summarize_pipeline as summarize_cluster

        sim, cluster = PipelineSimulation(sc, planned=planned), True
    elif cluster:
        from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster

        sim = ClusterSimulation(sc, planned=planned)
    else:
        # Every step through the engine step (no macro-step stretches) when each is logged.
        sim = Simulation(sc, macro_steps=not args.schedule, step_hook=validator and validator.hook, planned=planned)
        if validator is not None:
            validator.attach(sim)
    schedule_log = None
    if args.schedule:
        from sim.engine.logs.schedule_log import ScheduleLog

        out_dir.mkdir(parents=True, exist_ok=True)
        schedule_log = sim.core.schedule_log = ScheduleLog(out_dir / "schedule.jsonl")
    show = not args.quiet and not args.json and sys.stderr.isatty()
    try:
        with progress_bar(show, len(sim.sessions)) as progress:
            sim.progress = progress
            result = sim.run()
    except BaseException:
        if schedule_log is not None:
            schedule_log.discard()
        raise
    if schedule_log is not None:
        schedule_log.close()
    summary = summarize_cluster(result) if cluster else summarize(result)
    if validator is not None:
        from validation.inrun_stats import validation_section

        summary["validation"] = validation_section(validator, setup, result.end_s, result.calibration_name)
    write_run(out_dir, summary, result, None, stale, steps=args.steps)  # the data first: nothing after can lose it
    report = None
    if not args.no_report:
        from sim.outputs.report import render_report

        from sim.outputs.plotlyjs import include

        report = render_report(result, summary, sim.cal, include(args.plotly, out_dir))
        write_outputs(out_dir, {"report.html": report})
    if args.json:
        print(json.dumps(summary, indent=2))
    elif not args.quiet:
        print_summary(summary, out_dir, report=report is not None)
    if validator is not None and not args.quiet and not args.json:
        from validation.inrun_stats import summary_line

        print(summary_line(summary["validation"]))
    return 0


def _dispatch(args) -> int:
    if args.command == "run":
        from sim.gc_pause import fewer_collections

        with fewer_collections():  # the run, its summary and its files (sim/gc_pause.py)
            return _run(args)
    if args.command == "sweep":
        from sim.cli.sweep import run_sweep_command

        return run_sweep_command(args)
    if args.command == "compare":
        from sim.cli.sweep import check_compare_out
        from sim.outputs.compare import run_compare

        check_compare_out(args)
        return run_compare(args)
    if args.command == "plan":
        from sim.cli.plan import run_plan_command

        return run_plan_command(args)
    if args.command == "serve":
        from sim.cli.serve import run_serve

        return run_serve(args)
    if args.command == "validate":
        from validation.cli import run_validate

        return run_validate(args)
    if args.command in ("models", "gpus", "scenarios"):
        from sim.cli.catalog import run_catalog

        return run_catalog(args)
    from sim.cli.kv import run_kv

    return run_kv(args)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else None  # (the top-level parser has no options but -h)
    return cli_exit_code(lambda: _dispatch(build_parser(command).parse_args(args)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

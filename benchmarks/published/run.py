"""Score kvsim against published measurements of real serving engines.

    python benchmarks/published/run.py [--cases DIR] [--only ID ...] [--jobs N] [--markdown OUT.md] [--json OUT.json]

Loads every case in ``cases/`` (README.md describes the format), validates it, runs its
scenario through kvsim (no files written), computes the case's metric and prints one row
per case (published, simulated, signed error = simulated / published - 1) and, per family,
the mean absolute percentage error (MAPE) and the mean signed error, then per source (a case's
citation URL) and, per family, the mean over sources (each source weighs the same). ``--jobs N``
simulates N cases at a time in worker processes (same results, same order). A bad case is one line
``error: <file>: <key>: <what is wrong>`` and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from split import read_split  # noqa: E402
from suite import CASES_DIR, Outcome, family_stats, load_cases, run_case, source_stats  # noqa: E402

from sim.errors import ConfigError  # noqa: E402


def _num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def case_table(outcomes: list[Outcome]) -> str:
    lines = ["| case | family | engine | GPU | model | metric | published | simulated | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        c = o.case
        sim = _num(o.simulated) if o.status == "ok" else ("not runnable yet" if o.status == "not_runnable"
                                                           else "FAILED")
        lines.append(f"| {c.id} | {c.family} | {c.engine} | {c.scenario.get('gpu', '-')} | "
                     f"{c.scenario.get('model', '-')} | {c.metric} | {_num(c.value)} {c.published['unit']} | "
                     f"{sim} | {_pct(o.signed_error)} |")
    return "\n".join(lines)


def family_table(outcomes: list[Outcome]) -> str:
    lines = ["| family | cases | MAPE | mean signed error |", "|---|---|---|---|"]
    for row in family_stats(outcomes):
        mape = "-" if row["mape"] is None else f"{100 * row['mape']:.1f}%"
        lines.append(f"| {row['family']} | {row['count']} | {mape} | {_pct(row['mean_signed_error'])} |")
    return "\n".join(lines)


def source_table(outcomes: list[Outcome]) -> str:
    lines = ["| family | source | cases | MAPE | mean signed error |", "|---|---|---|---|---|"]
    for row in source_stats(outcomes):
        lines.append(f"| {row['family']} | {row['source']} | {row['count']} | {100 * row['mape']:.1f}% | "
                     f"{_pct(row['mean_signed_error'])} |")
    return "\n".join(lines)


def report(outcomes: list[Outcome]) -> str:
    parts = ["## Per case", "", case_table(outcomes), "", "## Per source (runnable cases)", "",
             source_table(outcomes), "", "## Per family (runnable cases)", "", family_table(outcomes)]
    split = read_split()  # the frozen train/test split (split.py): the test side is the one to quote
    for side in ("test", "train"):
        mine = [o for o in outcomes if split.get(o.case.id) == side]
        if mine:
            parts += ["", f"## Per family, {side} split ({len(mine)} cases; split.yaml)", "", family_table(mine)]
    unsplit = [o.case.id for o in outcomes if o.case.id not in split]
    if unsplit:
        parts += ["", f"Not in split.yaml (run split.py --assign): {', '.join(unsplit)}"]
    failed = [o for o in outcomes if o.status == "failed"]
    skipped = [o for o in outcomes if o.status == "not_runnable"]
    if skipped:
        parts += ["", "Not runnable yet: " + ", ".join(f"{o.case.id} ({o.error})" for o in skipped)]
    if failed:
        parts += ["", "Failed: " + "; ".join(f"{o.case.id}: {o.error}" for o in failed)]
    return "\n".join(parts) + "\n"


def as_json(outcomes: list[Outcome]) -> dict:
    split = read_split()
    return {
        "cases": [{
            "id": o.case.id, "family": o.case.family, "engine": o.case.engine,
            "profile": o.case.profile, "gpu": o.case.scenario.get("gpu"),
            "model": o.case.scenario.get("model"), "metric": o.case.metric,
            "published": o.case.value, "unit": o.case.published["unit"], "simulated": o.simulated,
            "signed_error": o.signed_error, "status": o.status, "error": o.error,
            "wall_s": round(o.wall_s, 3), "url": o.case.citation["url"], "split": split.get(o.case.id),
        } for o in outcomes],
        "families": family_stats(outcomes),
        "families_test": family_stats([o for o in outcomes if split.get(o.case.id) == "test"]),
        "families_train": family_stats([o for o in outcomes if split.get(o.case.id) == "train"]),
        "sources": source_stats(outcomes),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=str(CASES_DIR), help="folder of case YAML files")
    p.add_argument("--only", nargs="+", default=None, metavar="ID", help="run only these case ids")
    p.add_argument("--markdown", default=None, metavar="OUT.md", help="also write the tables here")
    p.add_argument("--json", default=None, metavar="OUT.json", help="also write the results as JSON")
    p.add_argument("--quiet", action="store_true", help="no per-case progress on stderr")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help=f"cases simulated at a time, in worker processes (this machine has {os.cpu_count()} CPUs)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        print(f"error: --jobs: got {args.jobs}; allowed: 1 or more", file=sys.stderr)
        return 2
    try:
        cases = load_cases(args.cases, args.only)
        t0 = time.perf_counter()
        outcomes = []
        with ProcessPoolExecutor(args.jobs) if args.jobs > 1 else nullcontext() as pool:
            for o in (pool.map(run_case, cases, chunksize=4) if pool else map(run_case, cases)):
                outcomes.append(o)
                if not args.quiet:
                    print(f"  {o.case.id}: {o.status} ({o.wall_s:.1f} s)", file=sys.stderr)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = report(outcomes)
    print(text)
    print(f"{len(outcomes)} cases in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(as_json(outcomes), indent=2) + "\n")
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())

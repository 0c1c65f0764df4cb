"""How do wall time and memory grow with the number of simulated requests?

    python benchmarks/sim_scale.py [--sizes 10000 100000] [--million] [--repeats 1]
                                   [--steps full none] [--no-azure] [--sim .venv/bin/sim]

Runs ``sim run scenarios/chatbot.yaml --set workload.num_requests=N`` for each size (1M
too with ``--million``; tens of minutes) and the one-hour Azure replay
(``scenarios/azure-conv.yaml``), each with every ``--steps`` mode and report.html on, one
child process per run, and prints a Markdown table: wall seconds of the whole command
(start-up, simulation, files and report), the simulation's own seconds (``sim_wall_s``),
engine steps and simulated requests per wall second (of the whole command), the child's
peak RSS (``wait4`` rusage) and the sizes of report.html and steps.csv. Record the figures
in benchmarks/RESULTS.md with the machine, date, versions and working-tree state printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import simpy

ROOT = Path(__file__).resolve().parent.parent


def _tree_state() -> str:
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
        changed = [line[3:] for line in dirty if line.strip()]
        return f"{head}" + (f" + uncommitted changes to {', '.join(changed)}" if changed else " (clean)")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def run_one(sim: str, scenario: Path, sets: list[str], steps: str, out: Path) -> dict:
    """One ``sim run`` in a child process: its wall seconds, peak RSS and outputs."""
    cmd = [sim, "run", str(scenario), "--out", str(out), "--quiet", "--force", "--steps", steps]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()}")
    summary = json.loads((out / "summary.json").read_text())
    size = lambda name: (out / name).stat().st_size if (out / name).exists() else 0  # noqa: E731
    return {
        "wall_s": wall, "sim_wall_s": summary["sim_wall_s"],
        "requests": summary["requests"]["arrived"], "steps": summary["engine"]["num_steps"],
        "peak_rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
        "report_mb": size("report.html") / 2**20, "steps_csv_mb": size("steps.csv") / 2**20,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--million", action="store_true", help="add 1,000,000 requests (long)")
    ap.add_argument("--steps", nargs="+", default=["full", "none"], choices=("full", "sampled", "none"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--no-azure", action="store_true", help="skip the Azure hour")
    ap.add_argument("--sim", default=shutil.which("sim") or str(Path(sys.executable).parent / "sim"))
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, simpy {simpy.__version__}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"working tree: {_tree_state()}\n")
    cases = [(f"chatbot {n:,}", ROOT / "scenarios" / "chatbot.yaml", [f"workload.num_requests={n}"])
             for n in args.sizes + ([1_000_000] if args.million else [])]
    if not args.no_azure:
        cases.append(("azure-conv hour", ROOT / "scenarios" / "azure-conv.yaml", []))
    print("| run | --steps | requests | steps | wall s | sim s | steps/s | requests/s | peak RSS MB "
          "| report.html MB | steps.csv MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="sim_scale.") as tmp:
        for name, scenario, sets in cases:
            for steps in args.steps:
                for _ in range(args.repeats):
                    r = run_one(args.sim, scenario, sets, steps, Path(tmp) / "out")
                    print(f"| {name} | {steps} | {r['requests']:,} | {r['steps']:,} | {r['wall_s']:.1f} "
                          f"| {r['sim_wall_s']:.1f} | {r['steps'] / r['wall_s']:,.0f} "
                          f"| {r['requests'] / r['wall_s']:,.0f} | {r['peak_rss_mb']:,.0f} "
                          f"| {r['report_mb']:.2f} | {r['steps_csv_mb']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

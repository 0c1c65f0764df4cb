"""How do wall time and memory grow with the number of simulated requests?

    python benchmarks/sim_scale.py [--sizes 10000 100000] [--million] [--repeats 1]
                                   [--steps full none] [--no-azure] [--sim .venv/bin/sim]
                                   [--baseline REV]

Runs ``sim run scenarios/chatbot.yaml --set workload.num_requests=N`` for each size (1M
too with ``--million``; tens of minutes) and the one-hour Azure replay
(``scenarios/azure-conv.yaml``), each with every ``--steps`` mode and report.html on, one
child process per run, and prints a Markdown table: wall seconds of the whole command
(start-up, simulation, files and report), the simulation's own seconds (``sim_wall_s``),
engine steps and simulated requests per wall second (of the whole command), the child's
peak RSS (``wait4`` rusage) and the sizes of report.html and steps.csv. Record the figures
in benchmarks/RESULTS.md with the machine, date, versions and working-tree state printed.

``--baseline REV`` installs the git revision REV (``git archive`` into a temporary folder,
``pip install`` into a temporary venv with the same interpreter) and runs every case on
the old and the new tree alternately, ``--repeats`` pairs (default 3 with a baseline), so
that both see the same load on a shared machine; the table gets a row per tree and run and
each case a line with the speedup (old wall / new wall, of the whole command and of the
simulation alone): median and range over the pairs. The baseline runs with no ``PYTHONPATH``
(one naming the working tree would run it in the baseline's place) and the working tree with
``PYTHONPATH`` set to it; the header prints where each tree's ``sim`` is imported from. The
working tree's ``sim`` is byte-compiled first (``compile_tree``), as the baseline's install is.
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


def tree_env(baseline: bool) -> dict:
    """The child's environment: the working tree's ``sim`` first on the path (an editable install
    elsewhere would run another tree), and a baseline's with no ``PYTHONPATH`` at all (the working
    tree on it would run in place of the baseline's installed copy)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if not baseline:
        env["PYTHONPATH"] = str(ROOT)
    return env


def compile_tree() -> int:
    """Byte-compile the working tree's ``sim`` package, as ``pip install`` does for the baseline's
    copy: where ``PYTHONDONTWRITEBYTECODE`` is set (this VM sets it) every run of the working tree
    would otherwise compile its ~130 modules from source again (0.1-0.2 s a run), and the
    baseline's would not. Returns how many ``.pyc`` files the package has afterwards."""
    import compileall

    compileall.compile_dir(ROOT / "sim", quiet=1)
    return sum(1 for _ in (ROOT / "sim").rglob("*.pyc"))


def sim_source(sim: str, env: dict) -> str:
    """Where the ``sim`` package that ``sim`` (a console script) runs is imported from."""
    python = Path(sim).parent / "python"
    out = subprocess.run([str(python), "-c", "import sim; print(sim.__file__)"], env=env, cwd="/",
                         capture_output=True, text=True, check=False)  # (not the current folder's sim)
    return out.stdout.strip() or out.stderr.strip()[-200:]


def run_one(sim: str, scenario: Path, sets: list[str], steps: str, out: Path, env: dict | None = None) -> dict:
    """One ``sim run`` in a child process (``env``: its environment, ``tree_env``): its wall
    seconds, peak RSS and outputs."""
    cmd = [sim, "run", str(scenario), "--out", str(out), "--quiet", "--force", "--steps", steps]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
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


def build_baseline(rev: str, tmp: Path) -> str:
    """Install the tree at ``rev`` into a venv under ``tmp``; return the path of its ``sim``."""
    src, venv = tmp / "baseline-src", tmp / "baseline-venv"
    src.mkdir()
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev],
                                 capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"--baseline {rev}: git archive failed: {e.stderr.decode().strip()}") from None
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(src)], capture_output=True, text=True)
    if pip.returncode != 0:
        raise SystemExit(f"--baseline {rev}: pip install failed: {pip.stderr.strip()[-2000:]}")
    return str(venv / "bin" / "sim")


def _row(name: str, steps: str, r: dict) -> str:
    return (f"| {name} | {steps} | {r['requests']:,} | {r['steps']:,} | {r['wall_s']:.1f} "
            f"| {r['sim_wall_s']:.1f} | {r['steps'] / r['wall_s']:,.0f} "
            f"| {r['requests'] / r['wall_s']:,.0f} | {r['peak_rss_mb']:,.0f} "
            f"| {r['report_mb']:.2f} | {r['steps_csv_mb']:.2f} |")


def _speedup(old: list[dict], new: list[dict], key: str) -> str:
    ratios = sorted(o[key] / n[key] for o, n in zip(old, new))
    return f"{float(np.median(ratios)):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--million", action="store_true", help="add 1,000,000 requests (long)")
    ap.add_argument("--steps", nargs="+", default=["full", "none"], choices=("full", "sampled", "none"))
    ap.add_argument("--repeats", type=int, default=None, help="runs per case (pairs with --baseline; "
                    "default 1, or 3 with --baseline)")
    ap.add_argument("--baseline", metavar="REV", help="git revision to compare against, run alternately")
    ap.add_argument("--no-azure", action="store_true", help="skip the Azure hour")
    ap.add_argument("--sim", default=shutil.which("sim") or str(Path(sys.executable).parent / "sim"))
    args = ap.parse_args()
    repeats = args.repeats if args.repeats is not None else (3 if args.baseline else 1)
    print(f"python {platform.python_version()}, numpy {np.__version__}, simpy {simpy.__version__}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"working tree: {_tree_state()}; {compile_tree()} .pyc files in its sim/\n")
    cases = [(f"chatbot {n:,}", ROOT / "scenarios" / "chatbot.yaml", [f"workload.num_requests={n}"])
             for n in args.sizes + ([1_000_000] if args.million else [])]
    if not args.no_azure:
        cases.append(("azure-conv hour", ROOT / "scenarios" / "azure-conv.yaml", []))
    print("| run | --steps | requests | steps | wall s | sim s | steps/s | requests/s | peak RSS MB "
          "| report.html MB | steps.csv MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="sim_scale.") as tmp:
        baseline = build_baseline(args.baseline, Path(tmp)) if args.baseline else None
        old_env, new_env = tree_env(True), tree_env(False)
        print(f"working tree's sim: {sim_source(args.sim, new_env)}"
              + (f"; {args.baseline}'s: {sim_source(baseline, old_env)}" if baseline else "") + "\n")
        speedups = []
        for name, scenario, sets in cases:
            for steps in args.steps:
                olds, news = [], []
                for _ in range(repeats):
                    if baseline:
                        olds.append(run_one(baseline, scenario, sets, steps, Path(tmp) / "out", old_env))
                        print(_row(f"{name} @ {args.baseline}", steps, olds[-1]), flush=True)
                    news.append(run_one(args.sim, scenario, sets, steps, Path(tmp) / "out", new_env))
                    print(_row(name if not baseline else f"{name} @ working tree", steps, news[-1]), flush=True)
                if baseline:
                    speedups.append(f"- {name}, --steps {steps}: {_speedup(olds, news, 'wall_s')} whole "
                                    f"command, {_speedup(olds, news, 'sim_wall_s')} simulation "
                                    f"(old / new, median and range over {repeats} alternated pairs)")
        if speedups:
            print(f"\nspeedup of the working tree over {args.baseline}:")
            print("\n".join(speedups))
    return 0


if __name__ == "__main__":
    sys.exit(main())

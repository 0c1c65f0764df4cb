"""How do wall time and memory grow with the number of replicas of a cluster?

    python benchmarks/cluster_scale.py [--replicas 1 2 4 8 16] [--mode tiled|speedup]
                                       [--steps none] [--repeats 1] [--sim .venv/bin/sim]

Runs ``sim run scenarios/azure-conv.yaml`` (one A100 replica of Llama-3-8B replaying the
Azure 2023 conversation hour) and the same scenario with ``cluster.num_replicas: N``
(round-robin) replaying the trace at ``workload.trace.speedup: N``, one child process each
(issue #15's speed target: 16 replicas at 16x the hour in under 60 s on one core, peak RSS
linear in replicas). ``--mode tiled`` (the default) replays N copies of the hour laid end
to end at N times the speed: one simulated hour at N times the arrival rate, N times the
requests (16 replicas: 309,856), so each replica serves about one hour's load.
``--mode speedup`` replays the one hour N times faster: the same 19,366 requests over
3,600/N simulated seconds. Prints a Markdown table: wall seconds of the whole command
(start-up, simulation, summary, report.html), the simulation's own seconds
(``sim_wall_s``), engine steps summed over replicas, simulated seconds, requests per wall
second and the child's peak RSS (``wait4`` rusage). The child-process runner and the
working-tree state are benchmarks/sim_scale.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_scale import _tree_state, run_one  # noqa: E402  (benchmarks/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "azure-conv.yaml"
TRACE = ROOT / "scenarios" / "traces" / "azure_conv_2023.csv"


def tiled_trace(copies: int, out: Path) -> Path:
    """``copies`` copies of the hour end to end, copy k shifted by k times (the hour's span
    plus its mean gap), so that arrival times stay non-decreasing."""
    data = np.loadtxt(TRACE, delimiter=",", skiprows=1)
    arrived = data[:, 0] - data[0, 0]
    period = arrived[-1] + arrived[-1] / max(arrived.size - 1, 1)
    tiles = [np.column_stack([arrived + k * period, data[:, 1], data[:, 2]]) for k in range(copies)]
    np.savetxt(out, np.vstack(tiles), delimiter=",", fmt=["%.6f", "%d", "%d"],
               header="arrived_at,num_prefill_tokens,num_decode_tokens", comments="")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--mode", choices=("tiled", "speedup"), default="tiled")
    ap.add_argument("--steps", default="none", choices=("full", "sampled", "none"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--sim", default=shutil.which("sim") or str(Path(sys.executable).parent / "sim"))
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, simpy {simpy.__version__}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"working tree: {_tree_state()}; --mode {args.mode}, --steps {args.steps}, report.html on\n")
    print("| replicas | speedup | requests | steps | simulated s | wall s | sim s | requests / wall s "
          "| peak RSS MB | RSS MB / replica |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="cluster_scale.") as tmp:
        for n in args.replicas:
            sets = [] if n == 1 else [f"cluster.num_replicas={n}", "cluster.router=round-robin",
                                      f"workload.trace.speedup={n}"]
            if args.mode == "tiled" and n > 1:
                sets.append(f"workload.trace.path={tiled_trace(n, Path(tmp) / f'trace_{n}.csv')}")
            for _ in range(args.repeats):
                out = Path(tmp) / "out"
                r = run_one(args.sim, SCENARIO, sets, args.steps, out)
                simulated = json.loads((out / "summary.json").read_text())["engine"]["simulated_s"]
                print(f"| {n} | {n}x | {r['requests']:,} | {r['steps']:,} | {simulated:,.0f} | {r['wall_s']:.1f} "
                      f"| {r['sim_wall_s']:.1f} | {r['requests'] / r['wall_s']:,.0f} | {r['peak_rss_mb']:,.0f} "
                      f"| {r['peak_rss_mb'] / n:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast does the simulator replay the one-hour Azure conversation trace?

    python benchmarks/sim_azure.py [--repeats 3] [--scenario scenarios/azure-conv.yaml]

Runs the replay ``--repeats`` times in this process (no report, no files) and prints, per
run and as median / min / max: wall seconds, simulated requests per wall-clock second,
engine steps per wall-clock second. Record the figures in benchmarks/RESULTS.md with the
machine, date and versions this prints.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import simpy

from sim import __version__
from sim.engine.simulation import Simulation
from sim.engine.logs.metrics import summarize
from sim.config.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "azure-conv.yaml"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    print(f"kvsim {__version__}, python {platform.python_version()}, simpy {simpy.__version__}, "
          f"numpy {np.__version__}, {platform.machine()} {platform.processor() or ''}".strip())
    walls, rates, steps_rates = [], [], []
    for i in range(args.repeats):
        t0 = time.perf_counter()
        sc = load_scenario(args.scenario, args.overrides)
        sim = Simulation(sc)
        result = sim.run()
        summary = summarize(result)
        wall = time.perf_counter() - t0
        n, steps = summary["requests"]["arrived"], summary["engine"]["num_steps"]
        walls.append(wall)
        rates.append(n / wall)
        steps_rates.append(steps / wall)
        print(f"run {i + 1}: {wall:.2f} s wall for {n} requests, {steps} steps, "
              f"{summary['engine']['simulated_s']:.0f} s simulated -> {n / wall:,.0f} req/s, "
              f"{steps / wall:,.0f} steps/s")
    print(f"wall s: median {statistics.median(walls):.2f}, min {min(walls):.2f}, max {max(walls):.2f}")
    print(f"simulated requests per wall second: median {statistics.median(rates):,.0f}, "
          f"min {min(rates):,.0f}, max {max(rates):,.0f}")
    print(f"engine steps per wall second: median {statistics.median(steps_rates):,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

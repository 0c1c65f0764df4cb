"""How long does a 100-configuration `sim plan` take, and how many probes does bracket reuse save?

    python benchmarks/plan_bench.py [--workers 2] [--num-requests 300] [--modes reuse cold]
                                    [--out /tmp/plan-bench] [--sim .venv/bin/sim]

Writes a plan on the chatbot workload (scenarios/chatbot.yaml: Llama-3-8B, ShareGPT-like
lengths; p95 TTFT <= 1 s, p95 TPOT <= 50 ms, 95% attainment, 20 req/s target) over
3 GPUs x 4 scheduler.max_num_seqs x 3 engine.max_model_len x 3
engine.gpu_memory_utilization = 108 configurations, and runs ``sim plan`` on it once per
mode, each as one child process (``--workers`` local processes): ``reuse`` (the default:
chains along gpu_memory_utilization start from their smaller-pool neighbour's answer) and
``cold`` (``search.reuse: false``: every search starts at min_rate). Prints a Markdown
table: wall seconds of the whole command, probes run, the plan's own estimate of probes
saved, warm-started configurations, configurations below their smaller-pool neighbour, and
for ``reuse`` against ``cold`` the largest relative difference of max rates (both answers
are within the tolerance of the threshold when the verdict is monotone in the rate) and
whether the best configuration is the same. Record the figures with the machine, date and
versions it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SPACE = {
    "gpu": ["a100-80gb", "h100-sxm", "l40s"],
    "scheduler.max_num_seqs": [32, 64, 128, 256],
    "engine.max_model_len": [2048, 4096, 8192],  # Llama-3-8B: 8K context (vLLM refuses longer)
    "engine.gpu_memory_utilization": [0.5, 0.7, 0.9],
}


def write_plan(folder: Path, num_requests: int, reuse: bool) -> Path:
    doc = {"name": "plan-bench", "scenario": str(ROOT / "scenarios" / "chatbot.yaml"),
           "slo": {"ttft_s": 1.0, "tpot_s": 0.05, "percentile": 95, "attainment": 0.95}, "target_rate": 20,
           "space": SPACE,
           "search": {"min_rate": 0.5, "max_rate": 64, "tolerance": 0.05, "num_requests": num_requests,
                      "reuse": reuse}}
    path = folder / f"plan-{'reuse' if reuse else 'cold'}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_mode(sim: str, folder: Path, mode: str, workers: int, num_requests: int) -> dict:
    plan = write_plan(folder, num_requests, mode == "reuse")
    out = folder / mode
    t0, cpu0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sim, "plan", str(plan), "--workers", str(workers), "--out", str(out), "--force",
                           "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)  # the plan and its workers
    if done.returncode != 0:
        sys.exit(f"sim plan ({mode}) failed: {done.stderr.strip()}")
    doc = json.loads((out / "plan.json").read_text())
    return {"mode": mode, "wall_s": wall, "cpu_s": cpu, "doc": doc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--num-requests", type=int, default=300)
    ap.add_argument("--modes", nargs="+", default=["reuse", "cold"], choices=["reuse", "cold"])
    ap.add_argument("--out", default="/tmp/plan-bench")
    ap.add_argument("--sim", default=str(ROOT / ".venv" / "bin" / "sim"))
    args = ap.parse_args()
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs; "
          f"Python {platform.python_version()}; HEAD {rev.stdout.strip()} (plus the working tree); "
          f"started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    runs = [run_mode(args.sim, folder, m, args.workers, args.num_requests) for m in args.modes]
    print("\n| mode | configurations | feasible | wall s | CPU s | probes run | saved (estimate) | warm starts "
          "| below smaller pool | best |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        doc, p = r["doc"], r["doc"]["probes"]
        confs = doc["configurations"]
        best = next((c for c in confs if c["rank"] == 1), None)
        best_s = "-" if best is None else (f"{', '.join(f'{k}={v}' for k, v in best['values'].items())}: "
                                           f"{best['max_rate']:.2f} req/s, ${best['cost_per_hour']:.2f}/h")
        feasible = sum(c["status"] == "feasible" for c in confs)
        print(f"| {r['mode']} | {len(confs)} | {feasible} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} "
              f"| {p['run']} | {p['saved_estimate']} | {p['warm_started']} | {len(p['below_smaller_pool'])} "
              f"| {best_s} |")
    by = {r["mode"]: r["doc"] for r in runs}
    if "reuse" in by and "cold" in by:
        warm = {c["index"]: c for c in by["reuse"]["configurations"]}
        diffs, status_diff = [], 0
        for c in by["cold"]["configurations"]:
            w = warm[c["index"]]
            if c["status"] != w["status"]:
                status_diff += 1
            elif c["status"] == "feasible":
                diffs.append(abs(w["max_rate"] - c["max_rate"]) / c["max_rate"])
        within = sum(d <= by["cold"]["search"]["tolerance"] + 1e-9 for d in diffs)
        print(f"\nreuse against cold: probes {by['reuse']['probes']['run']} vs {by['cold']['probes']['run']} "
              f"({1 - by['reuse']['probes']['run'] / by['cold']['probes']['run']:.0%} fewer); max rates of "
              f"{len(diffs)} feasible configurations differ by at most {max(diffs, default=0):.1%} "
              f"({within} within the tolerance); {status_diff} configurations changed status")
    (folder / "bench.json").write_text(json.dumps({r["mode"]: {"wall_s": r["wall_s"], "cpu_s": r["cpu_s"],
                                                               "probes": r["doc"]["probes"]}
                                                   for r in runs}, indent=1))


if __name__ == "__main__":
    main()

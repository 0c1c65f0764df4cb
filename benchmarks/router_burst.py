"""Routers under a burst of shared-prefix requests, against SGLang's published claim.

    python benchmarks/router_burst.py [--scenario scenarios/router-burst.yaml] [--sim .venv/bin/sim]

Runs the scenario (4 replicas of Llama-3-8B, 2,000 requests at 300/s in 200 groups sharing
4K-token prefixes) through ``sim run --no-report`` once per router (``cache-aware``,
``prefix-aware``, ``round-robin``, ``least-outstanding``) and prints a Markdown table: prefix-cache hit
rate, throughput, TTFT p50/p99, each against round-robin's. SGLang's v0.4 release notes
(December 2024) say their cache-aware router gives "up to 1.9x" the throughput and "3.8x" the
cache hit rate of round-robin on a workload of long prefix groups; they state neither the group
count, lengths, rates nor the pool size behind it, so this is a comparison of direction and
order of magnitude, not a graded case of benchmarks/published/ (no constant is fitted to it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUTERS = ("cache-aware", "prefix-aware", "round-robin", "least-outstanding")
PUBLISHED = {"hit_rate": 3.8, "throughput": 1.9}  # cache-aware / round-robin, SGLang v0.4 (up to)


def run(sim: str, scenario: Path, router: str, out: Path) -> dict:
    subprocess.run([sim, "run", str(scenario), "--set", f"cluster.router={router}", "--out", str(out),
                    "--no-report", "--quiet"], check=True)
    return json.loads((out / "summary.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=ROOT / "scenarios" / "router-burst.yaml")
    ap.add_argument("--sim", default=str(Path(sys.executable).with_name("sim")))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="router-burst-") as tmp:
        rows = {r: run(args.sim, args.scenario, r, Path(tmp) / r) for r in ROUTERS}
    rr = rows["round-robin"]
    print("| router | prefix-cache hit rate | x round-robin | requests/s | x round-robin | TTFT p50 / p99 s |")
    print("|---|---|---|---|---|---|")
    for router, s in rows.items():
        hit, tput = s["kv"]["prefix_cache_hit_rate"], s["throughput"]["requests_per_s"]
        print(f"| {router} | {hit:.1%} | {hit / rr['kv']['prefix_cache_hit_rate']:.2f} | {tput:.1f} | "
              f"{tput / rr['throughput']['requests_per_s']:.2f} | {s['ttft_s']['p50']:.1f} / {s['ttft_s']['p99']:.1f} |")
    print(f"\nSGLang v0.4 (published, workload not stated in full): cache-aware x round-robin: hit rate "
          f"{PUBLISHED['hit_rate']}x, throughput up to {PUBLISHED['throughput']}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

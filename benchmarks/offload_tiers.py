"""The KV offload story's table (docs/guides/kv-offload.md): the shipped multi-turn chat,
scenarios/multiturn-offload.yaml, with no tier, CPU tiers of three sizes (one storing only reused blocks,
one behind a slow link), and CPU + disk.

    python benchmarks/offload_tiers.py [--out DIR]

Each row is one ``sim run`` through the command line (``--no-report``); the table is Markdown
on stdout. Simulated numbers: the same on any machine (seed 43).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "multiturn-offload.yaml"
DISK = "{tier: disk, capacity_gb: 64}"
RUNS = [
    ("no tier", "null"),
    ("CPU 2 GiB", "{tier: cpu, capacity_gb: 2}"),
    ("CPU 8 GiB", "{tier: cpu, capacity_gb: 8}"),
    ("CPU 32 GiB (shipped)", None),
    ("CPU 32 GiB, `store: reused`", "{tier: cpu, capacity_gb: 32, store: reused}"),
    ("CPU 32 GiB at 5 GB/s", "{tier: cpu, capacity_gb: 32, bandwidth_gb_per_s: 5}"),
    ("CPU 2 GiB + disk 64 GiB", f"[{{tier: cpu, capacity_gb: 2}}, {DISK}]"),
    ("CPU 8 GiB + disk 64 GiB", f"[{{tier: cpu, capacity_gb: 8}}, {DISK}]"),
    ("CPU 8 GiB + disk 64 GiB at 1 GB/s", "[{tier: cpu, capacity_gb: 8}, {tier: disk, capacity_gb: 64, "
                                          "bandwidth_gb_per_s: 1, write_bandwidth_gb_per_s: 1}]"),
]
HEAD = ("| run | TTFT p50 | TTFT p90 | TTFT p99 | TTFT mean | output tok/s | SLO met | CPU hit tokens "
        "| disk hit tokens | GiB to the GPU | disk GiB read / written | disk read s | run s |")


def row(name: str, s: dict) -> str:
    t, off = s["ttft_s"], s.get("kv_offload") or {}
    tiers = off.get("tiers") or {}
    cpu_hits = tiers["cpu"]["hit_tokens"] if tiers else off.get("hit_tokens", 0)
    disk = tiers.get("disk")
    gib = 2**30
    disk_cells = (f"{disk['hit_tokens']:,} | {off['bytes_loaded'] / gib:.1f} | {disk['bytes_read'] / gib:.1f} / "
                  f"{disk['bytes_written'] / gib:.1f} | {disk['read_busy_s']:.2f}" if disk else
                  f"– | {off.get('bytes_loaded', 0) / gib:.1f} | – | –")
    return (f"| {name} | {t['p50']:.3f} | {t['p90']:.3f} | {t['p99']:.3f} | {t['mean']:.3f} | "
            f"{s['throughput']['output_tokens_per_s']:.1f} | {s['slo']['attained_fraction']:.1%} | "
            f"{cpu_hits:,} | {disk_cells} | {s['engine']['simulated_s']:.1f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="keep the runs here (default: a temporary folder, removed)")
    args = ap.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kvsim-offload-"))
    print(HEAD)
    print("|" + "---|" * (HEAD.count("|") - 1))
    try:
        for i, (name, offload) in enumerate(RUNS):
            run = out / f"run{i}"
            cmd = [sys.executable, "-m", "sim.cli", "run", str(SCENARIO), "--no-report", "--quiet", "--force",
                   "--out", str(run)] + (["--set", f"kv.offload={offload}"] if offload else [])
            subprocess.run(cmd, check=True, cwd=ROOT)
            print(row(name, json.loads((run / "summary.json").read_text())), flush=True)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

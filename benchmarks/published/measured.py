"""The published suite on measured kernel tables: each case on its GPU's datasheet calibration and
on the imported one of its engine's backend (``<gpu>@<backend>``, microbench import aiconfigurator).

    python benchmarks/published/measured.py [--jobs N] [--datasheet-json OUT.json] [--json OUT.json]

Only cases whose GPU and engine have an imported calibration in calibrations/ run (vLLM's
profiles take ``@vllm``, SGLang's ``@sglang``, TensorRT-LLM's ``@trtllm``); everything else about a
case is as run.py runs it. ``--datasheet-json`` takes the datasheet side from an earlier
``run.py --json`` of the same tree instead of running it again. Prints, per family and per
backend, the cases' MAPE and mean signed error on both calibrations.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import load_cases, run_case  # noqa: E402

from sim.calib.calibration import calibration_file  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

BACKEND = {"vllm-v1": "vllm", "vllm-v0": "vllm", "sglang": "sglang", "sglang-0.4": "sglang", "trtllm": "trtllm", "trtllm-pytorch": "trtllm"}


def measured_case(case):
    """The case on ``<gpu>@<backend>``, or None where there is no such calibration."""
    backend = BACKEND.get(case.profile)
    gpu = case.scenario.get("gpu")
    if backend is None or gpu is None or calibration_file(f"{gpu}@{backend}") is None:
        return None
    scenario = copy.deepcopy(case.scenario)
    scenario["gpu"] = f"{gpu}@{backend}"
    return dataclasses.replace(case, scenario=scenario)


def _run(case):
    try:
        o = run_case(case)
    except ConfigError as exc:  # e.g. a setting only a datasheet calibration runs (attention data parallel)
        return case.id, None, "refused", str(exc)[:300]
    return o.case.id, o.signed_error, o.status, o.error


def stats(errs: list[float]) -> str:
    if not errs:
        return "-"
    return f"{sum(abs(e) for e in errs) / len(errs):.1%} ({sum(errs) / len(errs):+.1%})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--datasheet-json", help="run.py --json output of this tree: the datasheet side")
    ap.add_argument("--json", help="write both sides per case here")
    ap.add_argument("--only-measured", action="store_true", help="run the imported side only (with --measured-cache)")
    ap.add_argument("--measured-cache", help="the imported side's results: read from here when the file exists, "
                    "else run and written here (to run the two sides at different times)")
    args = ap.parse_args()
    cases = [c for c in load_cases() if c.runnable]
    pairs = [(c, m) for c in cases if (m := measured_case(c)) is not None]
    cache = Path(args.measured_cache) if args.measured_cache else None
    measured = {}
    if cache is not None and cache.is_file():
        measured = {r[0]: tuple(r) for r in json.loads(cache.read_text())}
    earlier = {}
    if args.datasheet_json and Path(args.datasheet_json).is_file():
        earlier = {r["id"]: (r["id"], r["signed_error"], r["status"], r["error"])
                   for r in json.loads(Path(args.datasheet_json).read_text())["cases"]}
    todo = [m for c, m in pairs if c.id not in measured]
    if not args.only_measured:
        todo += [c for c, _ in pairs if c.id not in earlier]
    with ProcessPoolExecutor(args.jobs) as pool:
        done = list(pool.map(_run, todo, chunksize=4))
    n_meas = len([c for c, _ in pairs if c.id not in measured])
    measured.update((r[0], r) for r in done[:n_meas])
    if cache is not None:
        cache.write_text(json.dumps(list(measured.values())) + "\n")
    if args.only_measured:
        print(f"{len(measured)} cases on imported calibrations run{' and cached in ' + str(cache) if cache else ''}")
        return 0
    datasheet = {**earlier, **{r[0]: r for r in done[n_meas:]}}
    rows = []
    for c, m in pairs:
        d, s = datasheet[c.id], measured[c.id]
        rows.append({"id": c.id, "family": c.family, "backend": BACKEND[c.profile], "gpu": c.scenario.get("gpu"),
                     "datasheet": d[1], "measured": s[1], "measured_status": s[2], "measured_error": s[3]})
    both = [r for r in rows if r["datasheet"] is not None and r["measured"] is not None]
    failed = [r for r in rows if r["measured"] is None]
    print(f"{len(pairs)} cases have an imported calibration; {len(both)} ran on both, {len(failed)} failed on the "
          f"imported one" + (f" (first: {failed[0]['id']}: {failed[0]['measured_error']})" if failed else ""))
    print("\n| group | cases | datasheet MAPE (signed) | imported kernels MAPE (signed) |\n|---|---|---|---|")
    groups = {}
    for r in both:
        for key in (f"family {r['family']}", f"backend {r['backend']}", f"gpu {r['gpu']}", "all"):
            groups.setdefault(key, []).append(r)
    for key in sorted(groups, key=lambda k: (k == "all", k)):
        g = groups[key]
        print(f"| {key} | {len(g)} | {stats([r['datasheet'] for r in g])} | {stats([r['measured'] for r in g])} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

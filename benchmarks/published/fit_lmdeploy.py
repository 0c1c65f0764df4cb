"""Fit the ``lmdeploy`` profile's host times and the all-reduces' slowest-rank wait (issue #41), on train only.

    python benchmarks/published/fit_lmdeploy.py            # fit, print the grid's best and the error before/after
    python benchmarks/published/fit_lmdeploy.py --report   # only score the current constants, train and test

Two fits, in order, each a grid search minimising the mean |log(simulated / published)| over the
train side of split.yaml (split.train_ids):

1. TurboMind's host time per step and per sequence (sim/cost/profile.py ``_TURBOMIND_STEP_HOST_S``,
   ``_TURBOMIND_SEQ_HOST_S``) over the single-GPU ``lmdeploy`` cases: a one-GPU run has no all-reduce,
   so the wait below does not enter.
2. The mean lag of a rank at an all-reduce (sim/cost/collectives.py ``TP_RANK_JITTER_S``) over the
   tensor-parallel cases of dense models at batch 1 (step latency) or <= 64 (``max_num_seqs``), at most
   64 requests a run, every engine: where the
   slowest rank's wait is a visible share of a step. Mixture-of-experts cases are left out (gpt-fast's
   expert gather, kvsim's known MoE gap: docs/reference/fidelity.md).

The test side is only scored, never read to choose. A change of the constants is recorded in
benchmarks/published/fits.yaml (``python benchmarks/published/fits.py`` prints the fingerprint).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_scoring import errors, loss, summary  # noqa: E402
from split import read_split  # noqa: E402
from suite import load_cases, run_case  # noqa: E402

from sim.cost import collectives as coll  # noqa: E402
from sim.cost import profile as prof  # noqa: E402

STEP_GRID = [0.0, 2e-4, 4e-4, 6e-4, 8e-4, 1.0e-3, 1.2e-3, 1.5e-3]
SEQ_GRID = [0.0, 5e-6, 10e-6, 20e-6, 30e-6, 40e-6, 60e-6]
JITTER_GRID = [0.0, 0.5e-6, 1e-6, 1.5e-6, 2e-6, 3e-6, 4e-6, 5e-6, 6e-6, 8e-6, 10e-6]
#: How the wait grows with the ranks, per unit of jitter; the shipped one (sim/cost/collectives.py) is
#: ``slowest``; the others are compared on train only (``--forms``)
FORMS = {
    "slowest": lambda tp: sum(1.0 / k for k in range(2, tp + 1)),  # E[max of tp exponential lags] - one lag
    "per-peer": lambda tp: float(tp - 1),  # a flag written to / read from every other rank
    "log2": lambda tp: math.log2(tp),  # a tree of log2(tp) rounds
}


def _tp(case) -> int:
    return int((case.scenario.get("engine") or {}).get("tensor_parallel_size", 1))


def _small_batch(case) -> bool:
    """At most 64 requests a run (a perf table's thousands are saturated runs), and a batch-1 case
    (step_latency, whatever its ``max_num_seqs``) or at most 64 sequences a step."""
    seqs = int((case.scenario.get("scheduler") or {}).get("max_num_seqs", 1 << 30))
    few = int((case.scenario.get("workload") or {}).get("num_requests", 1 << 30)) <= 64
    return few and (case.family == "step_latency" or seqs <= 64)


def _dense(case) -> bool:
    model = str(case.scenario.get("model", ""))
    return not any(k in model for k in ("mixtral", "deepseek", "qwen3-30b", "qwen3-235b"))


def host_cases(cases):
    return [c for c in cases if c.profile == "lmdeploy" and _tp(c) == 1 and c.runnable]


def tp_cases(cases):
    return [c for c in cases if _tp(c) > 1 and _small_batch(c) and _dense(c) and c.runnable
            and c.family in ("step_latency", "saturated_throughput")]


def set_form(name: str) -> None:
    """Time the wait by form ``name`` of FORMS (this process only)."""
    grow = FORMS[name]
    coll.slowest_rank_wait_s = lambda tp, jitter_s=None: (
        (coll.TP_RANK_JITTER_S if jitter_s is None else jitter_s) * (grow(tp) if tp > 1 else 0.0))


def by_tp(cases) -> str:
    """Signed error per TP count under the constants now set."""
    groups: dict[int, list[float]] = {}
    for c in cases:
        o = run_case(c)
        if o.signed_error is not None:
            groups.setdefault(_tp(c), []).append(o.signed_error)
    return ", ".join(f"TP {tp}: {len(e)} cases {100 * sum(e) / len(e):+.1f}%" for tp, e in sorted(groups.items()))


def set_constants(step_s: float, seq_s: float, jitter_s: float) -> None:
    """Put the constants where the simulator reads them (this process only)."""
    prof._TURBOMIND_STEP_HOST_S, prof._TURBOMIND_SEQ_HOST_S = step_s, seq_s
    prof.PROFILES[prof.ProfileName.LMDEPLOY] = dataclasses.replace(
        prof.PROFILES[prof.ProfileName.LMDEPLOY], step_host_s=step_s, seq_host_s=seq_s)
    coll.TP_RANK_JITTER_S = jitter_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", action="store_true", help="score the current constants only")
    ap.add_argument("--forms", action="store_true", help="also fit the wait's other forms (FORMS) and compare")
    args = ap.parse_args(argv)
    split = read_split()
    cases = load_cases()
    train = [c for c in cases if split.get(c.id) == "train"]
    test = [c for c in cases if split.get(c.id) == "test"]
    now = (prof._TURBOMIND_STEP_HOST_S, prof._TURBOMIND_SEQ_HOST_S, coll.TP_RANK_JITTER_S)
    best = now
    if not args.report:
        hc = host_cases(train)
        scored = []
        for step_s in STEP_GRID:
            for seq_s in SEQ_GRID:
                set_constants(step_s, seq_s, now[2])
                scored.append((loss(errors(hc)), step_s, seq_s))
        _, step_s, seq_s = min(scored)
        tc = tp_cases(train)
        scored = []
        for jitter_s in JITTER_GRID:
            set_constants(step_s, seq_s, jitter_s)
            scored.append((loss(errors(tc)), jitter_s))
        best = (step_s, seq_s, min(scored)[1])
        print(f"fit (train only): step_host_s {best[0]:.2e}, seq_host_s {best[1]:.2e}, TP_RANK_JITTER_S {best[2]:.2e}"
              f" (train loss {min(scored)[0]:.4f})")
        for name in FORMS if args.forms else ():
            set_form(name)
            scored_f = []
            for jitter_s in JITTER_GRID:
                set_constants(step_s, seq_s, jitter_s)
                scored_f.append((loss(errors(tc)), jitter_s))
            lo, j = min(scored_f)
            set_constants(step_s, seq_s, j)
            print(f"  form {name}: jitter {j:.2e}, train loss {lo:.4f}; {by_tp(tc)}")
        set_form("slowest")
    rows = (("none (0, 0, 0)", (0.0, 0.0, 0.0)), ("current", now))
    for label, consts in rows + ((("fitted", best),) if not args.report else ()):
        set_constants(*consts)
        for side, pool in (("train", train), ("test", test)):
            print(f"{label} {side}: lmdeploy TP1 {summary(errors(host_cases(pool)))}; "
                  f"TP small-batch dense {summary(errors(tp_cases(pool)))}")
            print(f"  by TP: {by_tp(tp_cases(pool))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Fit the engine profiles' host-time numbers over the published cases.

The profiles (sim/cost/profile.py) charge host (CPU) time that no datasheet states: per step
and per sequence for a Python engine loop (vLLM, SGLang), per step for a compiled one
(TensorRT-LLM's executor, gpt-fast, llama.cpp), and per streamed token in the front end.
This script fits those four numbers at once over every runnable published case of the
step-latency, saturated-throughput and latency-under-load families
(benchmarks/published/cases), minimising the mean |log(simulated / published)|, by
coordinate search on a log grid. It never fits to one case: each number is shared by
every case of its engines. It prints the fit, the in-sample error per family, and a
two-fold check (fit on half of the sources, score the other half).

    python benchmarks/fit_host_time.py [--rounds 2]

It reads only the train side of the frozen split (split.yaml). A fit that changes the
numbers in sim/cost/profile.py is recorded in benchmarks/published/fits.yaml (date, this
script, data: train) with the fingerprint ``python benchmarks/published/fits.py`` prints.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "published"))

from split import train_ids  # noqa: E402
from suite import load_cases, simulate_metric  # noqa: E402

PYTHON_ENGINES = ("vllm-v0", "vllm-v1", "sglang", "sglang-0.4")
COMPILED_ENGINES = ("trtllm", "compiled")
FAMILIES = ("step_latency", "saturated_throughput", "latency_under_load")
GRIDS = {
    "py_step_host_s": [0.0, 0.25e-3, 0.5e-3, 1e-3, 1.5e-3, 2e-3, 3e-3, 4e-3, 6e-3, 8e-3],
    "py_seq_host_s": [0.0, 5e-6, 10e-6, 20e-6, 40e-6, 80e-6, 160e-6],
    "cpp_step_host_s": [0.0, 0.05e-3, 0.1e-3, 0.2e-3, 0.4e-3, 0.8e-3, 1.2e-3, 1.6e-3, 2.4e-3],
    "frontend_token_s": [0.0, 5e-6, 10e-6, 20e-6, 40e-6, 80e-6, 160e-6],
}
START = {"py_step_host_s": 1e-3, "py_seq_host_s": 10e-6, "cpp_step_host_s": 0.1e-3, "frontend_token_s": 20e-6}


def overrides_for(case, theta: dict) -> dict:
    if case.profile in PYTHON_ENGINES:
        return {"step_host_s": theta["py_step_host_s"], "seq_host_s": theta["py_seq_host_s"],
                "frontend_token_s": theta["frontend_token_s"]}
    if case.profile in COMPILED_ENGINES:
        return {"step_host_s": theta["cpp_step_host_s"], "frontend_token_s": theta["frontend_token_s"]}
    return {}


_cache: dict = {}


def log_error(case, theta: dict) -> float:
    ov = overrides_for(case, theta)
    key = (case.id, tuple(sorted(ov.items())))
    if key not in _cache:
        scenario = copy.deepcopy(case.scenario)
        eng = scenario.setdefault("engine", {})
        eng["profile_overrides"] = {**ov, **eng.get("profile_overrides", {})}  # a case's own facts win
        c = dataclasses.replace(case, scenario=scenario)
        _cache[key] = math.log(simulate_metric(c) / case.value)
    return _cache[key]


def loss(cases, theta: dict) -> float:
    return sum(abs(log_error(c, theta)) for c in cases) / len(cases)


def fit(cases, rounds: int) -> dict:
    theta = dict(START)
    for _ in range(rounds):
        for name, grid in GRIDS.items():
            scores = {v: loss(cases, {**theta, name: v}) for v in grid}
            theta[name] = min(scores, key=scores.get)
    return theta


def report(cases, theta: dict, label: str) -> None:
    print(f"{label}: " + ", ".join(f"{k} {v * 1e6:g} us" for k, v in theta.items()))
    for fam in FAMILIES:
        errs = [math.exp(log_error(c, theta)) - 1 for c in cases if c.family == fam]
        if errs:
            mape = sum(abs(e) for e in errs) / len(errs)
            print(f"  {fam:22s} {len(errs):3d} cases  MAPE {mape:6.1%}  mean signed {sum(errs) / len(errs):+6.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    train_side = train_ids()  # the frozen split (benchmarks/published/split.py): test cases are never fitted on
    cases = [c for c in load_cases() if c.runnable and c.family in FAMILIES and c.id in train_side]
    report(cases, START, "start")
    theta = fit(cases, args.rounds)
    report(cases, theta, "fit (the train split)")
    # two folds by source URL: cases of one source stay together
    fold = {c.id: zlib.crc32(c.citation["url"].encode()) % 2 for c in cases}
    for k in (0, 1):
        train = [c for c in cases if fold[c.id] != k]
        test = [c for c in cases if fold[c.id] == k]
        th = fit(train, args.rounds)
        errs = [abs(math.exp(log_error(c, th)) - 1) for c in test]
        print(f"fold {k}: fit on {len(train)} cases, held-out {len(test)} cases MAPE {sum(errs) / len(errs):.1%}")
    print(f"wall {time.perf_counter() - t0:.0f} s, {len(_cache)} simulations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""benchmarks/published/fit_lmdeploy.py: which cases each fit reads (train only, the right ones), and
that the shipped constants are the grids' choice, not a value off their edges."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

from sim.cost import collectives as coll
from sim.cost import profile as prof

SUITE_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "published"


if str(SUITE_DIR) not in sys.path:  # the suite's scripts import each other by name
    sys.path.insert(0, str(SUITE_DIR))
fit = importlib.import_module("fit_lmdeploy")
split = importlib.import_module("split")
suite = importlib.import_module("suite")
CASES = suite.load_cases()
SIDES = split.read_split()
TRAIN = [c for c in CASES if SIDES.get(c.id) == "train"]


def test_the_host_fit_reads_single_gpu_lmdeploy_train_cases_only() -> None:
    chosen = fit.host_cases(TRAIN)
    assert len(chosen) >= 10
    assert all(c.profile == "lmdeploy" and fit._tp(c) == 1 and SIDES[c.id] == "train" for c in chosen)


def test_the_wait_fit_reads_small_batch_dense_tp_cases_only() -> None:
    chosen = fit.tp_cases(TRAIN)
    assert {c.engine.split()[0] for c in chosen} >= {"gpt-fast", "lmdeploy"}
    for c in chosen:
        assert fit._tp(c) > 1 and "mixtral" not in c.scenario["model"]
        assert int(c.scenario["workload"]["num_requests"]) <= 64
    # batch-1 cases count whatever max_num_seqs their scenario allows (vLLM's MI300X rows allow 256)
    assert any(c.family == "step_latency" and c.scenario["scheduler"].get("max_num_seqs", 0) > 64 for c in chosen)


def test_the_forms_grow_with_the_ranks_and_vanish_at_one() -> None:
    for name, grow in fit.FORMS.items():
        assert grow(2) > 0, name
        assert grow(2) < grow(4) < grow(8), name
    assert fit.FORMS["slowest"](8) == sum(1 / k for k in range(2, 9))
    assert math.isclose(coll.slowest_rank_wait_s(8, 1.0), fit.FORMS["slowest"](8))


def test_the_shipped_constants_lie_inside_their_grids() -> None:
    for value, grid in ((prof._TURBOMIND_STEP_HOST_S, fit.STEP_GRID), (prof._TURBOMIND_SEQ_HOST_S, fit.SEQ_GRID),
                        (coll.TP_RANK_JITTER_S, fit.JITTER_GRID)):
        assert value in grid and value < grid[-1]
    assert prof.PROFILES[prof.ProfileName.LMDEPLOY].step_host_s == prof._TURBOMIND_STEP_HOST_S


def test_loss_is_zero_only_for_exact_predictions() -> None:
    assert fit.loss([0.0, 0.0]) == 0.0
    assert fit.loss([0.1]) == fit.loss([-1 / 11]) > 0  # symmetric in log: x1.1 and /1.1 weigh the same

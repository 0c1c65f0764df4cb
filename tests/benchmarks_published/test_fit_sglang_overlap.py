"""benchmarks/published/fit_sglang_overlap.py: which cases the fit reads (SGLang 0.4's train E2E and throughput
cases only, no TTFT cell, no other version), and that the shipped constants are points of its grids."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from sim.cost import profile as prof

SUITE_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "published"

if str(SUITE_DIR) not in sys.path:  # the suite's scripts import each other by name
    sys.path.insert(0, str(SUITE_DIR))
fit = importlib.import_module("fit_sglang_overlap")
split = importlib.import_module("split")
suite = importlib.import_module("suite")
CASES = suite.load_cases()
SIDES = split.read_split()
TRAIN = [c for c in CASES if SIDES.get(c.id) == "train"]


def test_the_fit_reads_sglang_04_train_e2e_and_throughput_cases_only() -> None:
    chosen = fit.fit_cases(TRAIN)
    assert len(chosen) >= 20
    assert {c.family for c in chosen} == {"latency_under_load", "saturated_throughput"}
    for c in chosen:
        assert SIDES[c.id] == "train" and c.profile == "sglang-0.4" and c.id.startswith("sglang-h200-")
        assert not c.metric.startswith("ttft")
    # the TTFT cells of the same runs are scored, not fitted; SGLang 0.3 and 0.5.3 never enter
    assert any(c.metric.startswith("ttft") for c in fit.sglang04_cases(TRAIN))
    assert not any(c.id.startswith(("sglang053-", "sglang-llama-", "dstack-")) for c in fit.sglang04_cases(CASES))


def test_the_shipped_constants_are_the_grids_points() -> None:
    assert prof._SGLANG_EXPOSED_STEP_S in fit.STEP_GRID
    assert prof._SGLANG_EXPOSED_SEQ_S in fit.SEQ_GRID + fit.SEQ_GRID_2
    assert prof._SGLANG_EXPOSED_KV_TOKEN_S in fit.KV_GRID
    sg = prof.PROFILES[prof.ProfileName.SGLANG_04]
    assert (sg.exposed_step_host_s, sg.exposed_seq_host_s, sg.exposed_kv_token_host_s) == (
        prof._SGLANG_EXPOSED_STEP_S, prof._SGLANG_EXPOSED_SEQ_S, prof._SGLANG_EXPOSED_KV_TOKEN_S)


def test_each_sglang_case_runs_its_versions_profile() -> None:
    """SGLang 0.4.x cases (datacrunch, dstack) run ``sglang-0.4``; 0.3 and 0.5.3 run ``sglang``, with no
    exposed host time of their own."""
    for c in CASES:
        if c.engine.lower() != "sglang":
            continue
        old = c.id.startswith(("sglang-h200-", "dstack-sglang"))
        assert c.profile == ("sglang-0.4" if old else "sglang"), c.id
        overrides = (c.scenario.get("engine") or {}).get("profile_overrides") or {}
        assert not any(k.startswith("exposed_") for k in overrides), c.id

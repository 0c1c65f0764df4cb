"""The sweep recipes in the shipped scenarios' headers are valid, and the PagedAttention
memory breakdown lands in the published bands."""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest

from sim.sweep.executors import run_local
from sim.sweep.grid import plan_sweep
from sim.sweep.runner import run_sweep

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
RECIPES = {"paged-memory-breakdown": 3, "paged-throughput": 18, "block-size": 27,
           "swap-vs-recompute": 12, "seed-advice": 36}


def recipe(name: str) -> list[str]:
    """The --grid options of the `sim sweep` command in a scenario file's header."""
    header = "".join(line[1:] for line in (SCENARIOS / f"{name}.yaml").read_text().splitlines()
                     if line.startswith("#"))
    command = re.search(r"sim sweep \S+((?:\s+\\?\s*--grid \S+)+)", header).group(1)
    words = shlex.split(command.replace("\\", " "))
    return [w for w in words if w != "--grid"]


@pytest.mark.parametrize("name, num_points", sorted(RECIPES.items()))
def test_recipe_plans_without_errors(name, num_points):
    plan = plan_sweep(str(SCENARIOS / f"{name}.yaml"), recipe(name))
    assert len(plan.points) == num_points
    invalid = [p for p in plan.points if p.error]
    # Only the seed's 8 GB card has combinations that cannot work.
    assert len(invalid) == (4 if name == "seed-advice" else 0)  # 32768 tokens, fp16 KV, utilization 0.85 or 0.90


def test_memory_breakdown_matches_the_published_bands(tmp_path):
    plan = plan_sweep(str(SCENARIOS / "paged-memory-breakdown.yaml"), recipe("paged-memory-breakdown"),
                      ["workload.num_requests=400"])
    run_sweep(plan, tmp_path, lambda tasks, on_result: run_local(tasks, on_result, 2))
    with (tmp_path / "results.csv").open() as f:
        used = {r["kv.allocator"]: 1 - float(r["kv.mean_allocated_unused_fraction"]) for r in csv.DictReader(f)}
    assert 0.15 <= used["contiguous-static"] <= 0.30  # published: 20.4% (Orca Max)
    assert used["contiguous-static"] < used["contiguous-exact"] <= 0.45  # Orca Oracle: 38.2%
    assert used["paged"] >= 0.96  # published: under 4% wasted

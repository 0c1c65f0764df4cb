"""The same sweep on the local process pool and on a local Ray gives the same results.csv.

Ray comes with the ``test`` extra; without it this test skips locally and fails under CI.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import yaml

from sim.sweep.executors import ExecutorKind, make_executor
from sim.sweep.grid import plan_sweep
from sim.sweep.runner import run_sweep

from test_sweep import GRID


@pytest.fixture(scope="module")
def ray_available():
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but ray is not installed: the test extra must bring it")
        pytest.skip("ray not installed (pip install 'kvsim[ray]')")


def test_local_pool_and_local_ray_give_identical_results(ray_available, tmp_path, tiny_sweep_scenario):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny_sweep_scenario))
    plan = plan_sweep(str(scenario), GRID)
    local = run_sweep(plan, tmp_path / "local", make_executor(ExecutorKind.LOCAL, 2))
    ray = run_sweep(plan, tmp_path / "ray", make_executor(ExecutorKind.RAY, 2))
    assert local.num_computed == ray.num_computed == 6 and local.num_errors == ray.num_errors == 0
    text = (tmp_path / "local" / "results.csv").read_text()
    assert text == (tmp_path / "ray" / "results.csv").read_text()
    assert len(text.splitlines()) == 7

"""Fixtures of the browser tests: a headless Chromium, and small runs, sweeps and comparisons.

Without Chromium the browser tests skip, except under CI (``CI=true``), where they fail:
CI installs Debian's ``chromium`` (see .ci/run) and must exercise them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from cdp import Browser

TINY = {
    "name": "tiny-report",
    "seed": 3,
    "model": "tiny-llama",
    "gpu": "a100-80gb",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 24},
    "kv": {"allocator": "paged", "block_size": 16, "swap_space_gb": 1},
    "scheduler": {"policy": "continuous", "preemption": "swap"},
    "workload": {
        "num_requests": 50,
        "arrival": {"type": "poisson", "rate": 40.0},
        "prompt_tokens": {"type": "uniform", "low": 20, "high": 120},
        "output_tokens": {"type": "uniform", "low": 10, "high": 120},
    },
}


def chromium_path() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


@pytest.fixture(scope="session")
def browser():
    exe = chromium_path()
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but chromium is not installed: .ci/run must install it")
        pytest.skip("chromium not installed (apt-get install chromium)")
    with Browser(exe) as b:
        yield b


@pytest.fixture(scope="session")
def tiny_scenario(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scenario") / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


GRID = ["kv.allocator=contiguous-static,paged", "workload.arrival.rate=10,40",
        "kv.prefix_caching=false,true"]


@pytest.fixture(scope="session")
def tiny_sweep(tiny_scenario, tmp_path_factory) -> Path:
    """8 points in-process; (contiguous-static, prefix caching) is an invalid combination."""
    from sim.sweep.executors import run_local
    from sim.sweep.grid import plan_sweep
    from sim.sweep.runner import run_sweep

    out = tmp_path_factory.mktemp("sweep")
    plan = plan_sweep(str(tiny_scenario), GRID)
    stats = run_sweep(plan, out, lambda tasks, on_result: run_local(tasks, on_result, 1))
    assert (stats.num_points, stats.num_invalid, stats.num_errors) == (8, 2, 0)
    return out

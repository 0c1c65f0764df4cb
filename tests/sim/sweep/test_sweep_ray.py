"""The same sweep on the local process pool and on a local Ray gives the same results.csv.

Ray comes with the ``test`` extra; without it this test skips locally and fails under CI.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time

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


def _sweep_on(ray_address: str, scenario, out) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", "import sys; from sim.cli.main import main; sys.exit(main())",
            "sweep", str(scenario), "--grid", "kv.block_size=16,32", "--out", str(out),
            "--executor", "ray", "--ray-address", ray_address, "--ray-timeout", "2"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize("listening, words", [
    (False, "cannot reach a Ray cluster there"),  # nothing listens: refused at once
    (True, "no Ray cluster answered within 2 s"),  # something listens but never answers like Ray
])
def test_an_unreachable_ray_address_is_one_line_within_the_timeout(ray_available, tmp_path, tiny_sweep_scenario,
                                                                   listening, words):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny_sweep_scenario))
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        if listening:
            server.listen(8)
        else:
            server.close()
        start = time.monotonic()
        done = _sweep_on(f"127.0.0.1:{port}", scenario, tmp_path / "out")
        took = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: --ray-address: 127.0.0.1:{port}: {words}")
    assert done.stderr.count("\n") == 1, done.stderr
    assert took < 30 and not (tmp_path / "out").exists()  # bounded, and nothing was written


def test_ray_timeout_must_be_positive_and_needs_ray(tmp_path, tiny_sweep_scenario, capsys):
    from sim.cli.main import main

    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(tiny_sweep_scenario))
    base = ["sweep", str(scenario), "--grid", "kv.block_size=16", "--out", str(tmp_path / "o")]
    assert main(base + ["--executor", "ray", "--ray-timeout", "0"]) == 2
    assert "--ray-timeout: 0.0: must be a positive number" in capsys.readouterr().err
    assert main(base + ["--ray-timeout", "5"]) == 2
    assert "only with --executor ray" in capsys.readouterr().err

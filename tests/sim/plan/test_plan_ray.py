"""`sim plan --executor ray` (a local Ray) gives the same plan.json as the local pool.

Ray comes with the ``test`` extra; without it this test skips locally and fails under CI.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from sim.cli.main import main


@pytest.fixture(scope="module")
def ray_available():
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but ray is not installed: the test extra must bring it")
        pytest.skip("ray not installed (pip install 'kvsim[ray]')")


def test_local_pool_and_local_ray_give_the_same_plan(ray_available, tiny_plan, write_plan, tmp_path, capsys):
    tiny_plan["base"]["engine"].pop("num_gpu_blocks_override")
    tiny_plan["space"] = {"scheduler.max_num_seqs": [4, 16], "engine.num_gpu_blocks_override": [32, 64]}
    path = write_plan(tiny_plan)
    docs = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        assert main(["plan", path, "--out", str(out), "--workers", "2", "--executor", executor, "--quiet"]) == 0
        docs[executor] = json.loads((out / "plan.json").read_text())
        docs[executor].pop("wall_s")
        assert len(list((out / "configs").glob("*.json"))) == 4
    assert docs["ray"] == docs["local"]
    assert docs["ray"]["probes"]["warm_started"] == 2
    assert {c["status"] for c in docs["ray"]["configurations"]} == {"feasible"}


def test_ray_options_need_the_ray_executor(tiny_plan, write_plan, tmp_path, capsys):
    path = write_plan(tiny_plan)
    assert main(["plan", path, "--out", str(tmp_path / "o"), "--ray-address", "auto"]) == 2
    assert main(["plan", path, "--out", str(tmp_path / "o"), "--ray-timeout", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") and "only with --executor ray" in line for line in err)
    assert not (tmp_path / "o").exists()

"""``sim validate`` with ``kv.offload`` (#43): the CPU tier's blocks move for real in lockstep and
validation.json reports each direction's transfer-time error; what it cannot run is refused."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from sim.cli.main import main  # noqa: E402


def scenario(tmp_path, **offload) -> str:
    data = {
        "name": "tiny-validate-tier", "seed": 4, "model": "tiny-llama", "gpu": "cpu-epyc-2core",
        "engine": {"max_model_len": 192, "num_gpu_blocks_override": 12},
        "kv": {"allocator": "paged", "block_size": 16, "prefix_caching": True,
               "offload": offload or {"tier": "cpu", "capacity_tokens": 4096}},
        "scheduler": {"policy": "chunked-prefill", "max_num_batched_tokens": 64, "max_num_seqs": 2},
        "workload": {"num_requests": 4, "arrival": {"type": "poisson", "rate": 50.0},
                     "prompt_tokens": {"type": "uniform", "low": 20, "high": 40},
                     "output_tokens": {"type": "uniform", "low": 4, "high": 8},
                     "conversation": {"turns": {"type": "fixed", "value": 3}, "think_time_s": 0.01}},
    }
    path = tmp_path / "v.yaml"
    path.write_text(json.dumps(data))
    return str(path)


def test_lockstep_reports_the_tiers_transfer_errors(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["validate", scenario(tmp_path), "--device", "cpu", "--mode", "lockstep", "--out", str(out),
                 "--no-warmup", "--no-drift-check"]) == 0
    result = json.loads((out / "validation.json").read_text())
    tt = result["tier_transfers"]
    assert tt["load"]["count"] > 0 and tt["store"]["count"] > 0
    for d in ("load", "store"):
        assert tt[d]["total_measured_s"] > 0 and tt[d]["bytes"] > 0
        assert tt[d]["mape"] >= abs(tt[d]["bias"]) - 1e-12  # a mean of |error| bounds the mean error
    assert tt["assumed_bandwidth_bytes_per_s"] == pytest.approx(46616300000.0)  # the calibration's host copies
    assert tt["reference_copy_bytes_per_s"] > 0
    assert result["lockstep"]["same_decisions_as_simulator"] is True
    assert "cpu tier loads:" in capsys.readouterr().out


@pytest.mark.parametrize("args, offload, key", [
    (["--mode", "both"], {}, "kv.offload"),
    (["--mode", "lockstep"], {"tier": "cpu", "capacity_tokens": 4096, "warm": True}, "kv.offload.warm"),
])
def test_what_it_cannot_run_is_refused_in_one_line(tmp_path, capsys, args, offload, key) -> None:
    assert main(["validate", scenario(tmp_path, **offload), "--device", "cpu", "--out", str(tmp_path / "o"),
                 "--no-warmup", "--no-drift-check", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and f": {key}: " in err[0]


def test_a_disk_tier_is_refused(tmp_path, capsys) -> None:
    path = scenario(tmp_path)
    data = json.loads(open(path).read())
    data["kv"]["offload"] = [{"tier": "cpu", "capacity_tokens": 4096}, {"tier": "disk", "capacity_tokens": 8192}]
    open(path, "w").write(json.dumps(data))
    assert main(["validate", path, "--device", "cpu", "--mode", "lockstep", "--no-warmup", "--no-drift-check",
                 "--out", str(tmp_path / "o")]) == 2
    assert "not to disk" in capsys.readouterr().err

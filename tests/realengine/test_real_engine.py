"""The real engine of ``sim validate``: correct attention through the paged cache, the
simulator's decisions in lockstep, and the whole pipeline's files."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from sim.cli.main import main  # noqa: E402
from sim.engine.simulation import Simulation  # noqa: E402
from sim.config.scenario import parse_scenario  # noqa: E402
from realengine.executor import StepExecutor, attention_mismatches  # noqa: E402
from realengine.model import TinyLlama  # noqa: E402


def tiny(**kw) -> dict:
    data = {
        "name": "tiny-validate", "seed": 2, "model": "tiny-llama", "gpu": "a100-80gb",
        "engine": {"max_model_len": 256, "num_gpu_blocks_override": 20},  # tight: swaps happen
        "kv": {"allocator": "paged", "block_size": 16, "prefix_caching": True},
        "scheduler": {"policy": "chunked-prefill", "max_num_batched_tokens": 48, "max_num_seqs": 6,
                      "preemption": "swap"},
        "workload": {"num_requests": 8, "arrival": {"type": "poisson", "rate": 200.0},
                     "prompt_tokens": {"type": "uniform", "low": 5, "high": 70},
                     "output_tokens": {"type": "uniform", "low": 2, "high": 40},
                     "shared_prefix": {"num_prefixes": 2, "prefix_tokens": 40}},
    }
    for key, value in kw.items():
        data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
    return data


def checked_run(data: dict, corrupt: bool = False) -> tuple[int, int]:
    """Run the scenario in lockstep; at every step compare each scheduled request's
    attention outputs (all layers) against a dense recomputation of its whole sequence.
    Returns (steps checked, token rows checked); with ``corrupt`` it returns on the first
    mismatch instead (a paged-cache bug must show)."""
    sc = parse_scenario(data, "/tmp/kvsim-test/validate.yaml")
    holder = {"steps": 0, "rows": 0, "mismatch": False}

    def hook(out) -> None:
        ex: StepExecutor = holder["ex"]
        ex.swaps(out)
        if not out.scheduled:  # a batch that only swapped requests out
            return
        inp = ex.pack(out)
        if corrupt and holder["steps"] == 3:  # point one sequence's first block elsewhere
            tables = inp.decode_block_tables if inp.decode_block_tables.numel() else inp.prefill_block_tables
            tables[0, 0] = (tables[0, 0] + 1) % model.key_caches[0].shape[0]
        _, kept = model.forward(inp, keep_attention=True)
        rows, bad = attention_mismatches(model, out, kept)
        holder["mismatch"] |= bool(bad)
        if not corrupt:
            assert not bad, f"step {holder['steps']}: (request, layer) {bad}"
        holder["rows"] += rows
        holder["steps"] += 1

    sim = Simulation(sc, step_hook=hook)
    model = TinyLlama(sim.model, num_blocks=sim.plan.num_gpu_blocks, block_size=16,
                      device=torch.device("cpu"), dtype=torch.float32, seed=0)
    holder["ex"] = StepExecutor(model, sim.allocator, 16, sc.kv.swap_transfer)
    result = sim.run()
    if corrupt:
        return holder["mismatch"]
    assert result.allocator.num_hit_tokens > 0  # cached prefixes were read from the cache
    assert any(r.num_swaps for r in result.requests)  # KV went to host memory and back
    assert holder["ex"].num_host_copies > 0
    return holder["steps"], holder["rows"]


@pytest.mark.parametrize("transfer", ["per-block", "gathered"])
def test_paged_attention_matches_dense_recomputation(transfer) -> None:
    steps, rows = checked_run(tiny(kv={"swap_transfer": transfer}))
    assert steps > 20 and rows > 300


def test_a_corrupted_block_table_is_caught() -> None:
    assert checked_run(tiny(), corrupt=True)


def test_validate_pipeline_end_to_end(tmp_path, capsys) -> None:
    path = tmp_path / "v.yaml"
    data = tiny(engine={"num_gpu_blocks_override": 20},
                workload={"num_requests": 6, "arrival": {"type": "poisson", "rate": 50.0},
                          "prompt_tokens": {"type": "uniform", "low": 5, "high": 40},
                          "output_tokens": {"type": "uniform", "low": 2, "high": 12}})
    data["gpu"] = "cpu-epyc-2core"  # a measured calibration with a composition
    path.write_text(json.dumps(data))
    out = tmp_path / "out"
    assert main(["validate", str(path), "--device", "cpu", "--out", str(out), "--no-warmup"]) == 0
    result = json.loads((out / "validation.json").read_text())
    lock, ol = result["lockstep"], result["open_loop"]
    assert lock["num_steps"] > 0 and lock["same_decisions_as_simulator"] is True
    # the plain kernel sum's error is reported next to the corrected one
    assert lock["kernel_sum"]["mape"] >= 0 and lock["kernel_sum"]["mape"] != lock["mape"]
    printed = capsys.readouterr().out
    assert "kernel sum without the calibration's composition" in printed
    # the calibration check re-timed some of the calibration's recorded steps
    assert result["calibration_drift"]["num_steps"] >= 2 and result["calibration_drift"]["ratio"] > 0
    assert "calibration check:" in printed
    assert lock["mape"] >= 0 and set(lock["by_kind"]) <= {"prefill", "decode", "mixed"}
    assert ol["completed"] == {"real": 6, "sim": 6}
    assert ol["ttft_s"]["p50"]["real"] > 0
    import csv

    rows = list(csv.DictReader((out / "validation_steps.csv").open()))
    assert {r["mode"] for r in rows} == {"lockstep", "open-loop"}
    assert sum(r["mode"] == "lockstep" for r in rows) == lock["num_steps"]
    assert sum(r["mode"] == "open-loop" for r in rows) == ol["real_step_errors"]["num_steps"]
    assert all(float(r["measured_s"]) > 0 and float(r["kernel_sum_s"]) > 0 for r in rows)
    idle = [r["idle_before_s"] for r in rows if r["mode"] == "open-loop"]
    assert idle[0] == "" and all(float(x) >= 0 for x in idle[1:])  # the first step follows nothing
    buckets = ol["real_step_errors_by_idle"]
    assert sum(b["num_steps"] for b in buckets) == len(idle) - 1
    html = (out / "validation.html").read_text()
    assert html.count("<script") >= 1 and "Lockstep" in html and "Open loop" in html


def test_validate_refuses_what_it_cannot_run(tmp_path, capsys) -> None:
    path = tmp_path / "v.yaml"
    path.write_text(json.dumps(tiny(kv={"allocator": "contiguous-exact", "prefix_caching": False})))
    assert main(["validate", str(path), "--device", "cpu", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: kv.allocator: ")
    path.write_text(json.dumps(tiny()))
    assert main(["validate", str(path), "--device", "tpu"]) == 2

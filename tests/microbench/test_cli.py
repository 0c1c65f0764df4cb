"""microbench CLI: calibrate on the CPU (quick, tiny model), fit foreign JSONL, predict, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from microbench.cli import main
from sim.calib.calibration import CalibrationSource, load_calibration

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def cpu_cal(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "cpu-test.yaml"
    rc = main(["calibrate", "--device", "cpu", "--quick", "--model", "tiny-llama", "--threads", "1",
               "--no-progress", "--out", str(out)])
    assert rc == 0
    return out


def test_calibrate_cpu_writes_jsonl_and_a_measured_calibration(cpu_cal: Path) -> None:
    lines = [json.loads(line) for line in cpu_cal.with_suffix(".jsonl").read_text().splitlines()]
    assert lines[0]["record"] == "device" and lines[0]["provenance"]["torch_threads"] == "1"
    kernels = {r["kernel"] for r in lines[1:]}
    assert {"gemm", "decode_attention", "prefill_attention", "kv_write", "rmsnorm", "copy_d2d",
            "copy_h2d", "copy_d2h", "step"} <= kernels
    assert all(r["time_s"] > 0 and r["p20_s"] <= r["time_s"] <= r["p80_s"] for r in lines[1:])
    cal = load_calibration(str(cpu_cal))
    assert cal.source is CalibrationSource.MEASURED and cal.schema == 2
    assert cal.source_label.startswith("measured 20")
    for key in ("device", "memory_bytes", "driver", "cuda", "torch", "triton", "kvsim", "date", "command", "schema"):
        assert key in cal.provenance
    assert cal.kernels["gemm"].cv_mape is not None and cal.kernels["gemm"].cv_folds >= 2
    assert cal.predict("gemm", m=64, n=512, k=256) > 0
    steps = [r for r in lines[1:] if r["kernel"] == "forward"]
    warm = [r for r in steps if not r.get("idle_s")]
    assert {r["num_layers"] for r in steps} == {2} and len(warm) == 9  # tiny-llama has 2 layers: 4 capped
    assert len(steps) == 18 and {r.get("idle_s") for r in steps} == {None, 0.05}  # each batch after a lull too
    assert cal.composition is not None and cal.composition.num_records == len(warm)
    assert cal.composition.idle_s == 0.05 and cal.composition.idle_scale > 0
    assert cal.composition.scale > 0 and cal.composition.cv_mape is not None
    assert cal.composition.combine == "sum"  # a CPU runs what it issues in turn: no overlap form


def test_sim_run_accepts_the_cpu_calibration(cpu_cal: Path, tmp_path: Path) -> None:
    from sim.cli.main import main as sim_main

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "chatbot.yaml"
    rc = sim_main(["run", str(scenario), "--set", f"gpu={cpu_cal}", "--set", "model=tiny-llama",
                   "--set", "workload.num_requests=20", "--set", "engine.max_model_len=1024",
                   "--set", "workload.max_tokens=32", "--out", str(tmp_path), "--no-report", "--quiet"])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["gpu"] == "cpu-test" and summary["calibration_source"] == "measured"
    r = summary["requests"]
    assert r["arrived"] == r["completed"] + r["rejected"] + r["in_flight"] and r["completed"] > 0


def test_fit_foreign_jsonl_and_predict(tmp_path: Path, capsys) -> None:
    device = {"record": "device", "name": "foreign", "gpu_name": "Some GPU", "memory_bytes": 1 << 34}
    recs = [{"kernel": "gemm", "m": m, "n": n, "k": 1024, "dtype": "fp16",
             "time_s": 4e-6 + max(2 * 1024 * n / 1e12, 2 * m * n * 1024 / 1e14)}
            for n in (1024, 2048, 4096) for m in (1, 16, 256, 4096)]
    recs += [{"kernel": "copy_h2d", "num_bytes": b, "pinned": True, "time_s": 1e-5 + b / 2e10} for b in (1 << 16, 1 << 24, 1 << 28)]
    recs += [{"kernel": "step", "num_seqs": s, "vocab_size": 32000, "time_s": 1e-4 + s * 1e-7} for s in (1, 8, 64)]
    path = tmp_path / "foreign.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [device, *recs]) + "\n")
    out = tmp_path / "foreign.yaml"
    assert main(["fit", str(path), "-o", str(out)]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["schema"] == 2 and set(data["kernels"]) == {"gemm", "copy_h2d", "step"}
    assert data["pcie_bandwidth_bytes_per_s"] == pytest.approx(2e10, rel=0.05)
    assert data["memory_bytes"] == 1 << 34
    capsys.readouterr()
    assert main(["predict", str(out), "--kernel", "gemm", "--m", "256", "--n", "4096", "--k", "1024"]) == 0
    seconds = float(capsys.readouterr().out.split()[0])
    assert seconds == pytest.approx(4e-6 + 2 * 256 * 4096 * 1024 / 1e14, rel=0.05)


def test_fit_of_a_gpu_record_uses_the_tile_term_and_regimes(tmp_path: Path, capsys) -> None:
    """A device record from a GPU (``microbench calibrate`` writes its SM count) gets the GEMM's
    tile/wave term and kernel regimes; the fitted calibration loads and runs a scenario."""
    device = {"record": "device", "name": "gpu", "gpu_name": "Some GPU", "memory_bytes": 1 << 36,
              "provenance": {"sm_count": "132", "cuda": "12.4"}}
    recs = [{"kernel": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16",
             "time_s": 4e-6 + max(2 * k * n / 2e12, 2 * m * n * k / 5e14)}
            for n, k in ((1024, 4096), (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
            for m in (1, 8, 32, 64, 100, 200, 256, 512, 1024, 4096)]
    path = tmp_path / "gpu.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [device, *recs]) + "\n")
    out = tmp_path / "gpu.yaml"
    assert main(["fit", str(path), "-o", str(out), "--base", "h100-sxm", "--folds", "2"]) == 0
    params = yaml.safe_load(out.read_text())["kernels"]["gemm"]["params"]
    assert params["sm_count"] == 132 and (params["small_max_m"], params["mid_max_m"]) == (64, 256)
    cal = load_calibration(str(out))
    times = [cal.predict("gemm", m=m, n=11008, k=4096, dtype="bf16") for m in range(1, 2000, 3)]  # unmeasured
    assert all(b >= a > 0 for a, b in zip(times, times[1:]))


@pytest.mark.parametrize("argv, fragment", [
    (["fit", "/nonexistent.jsonl", "-o", "x.yaml"], "/nonexistent.jsonl: <root>: cannot read"),
    (["predict", "a100-80gb", "--kernel", "gemv"], "unknown kernel 'gemv'"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "4"], "missing n, k"),
    (["predict", "no-such-gpu", "--kernel", "gemm"], "unknown GPU calibration"),
])
def test_bad_input_is_one_error_line_and_exit_2(argv, fragment, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0]


def test_predict_on_a_datasheet_calibration(capsys) -> None:
    assert main(["predict", "a100-80gb", "--kernel", "gemm", "--m", "256", "--n", "4096", "--k", "4096"]) == 0
    assert "datasheet roofline" in capsys.readouterr().out

"""Where ``microbench calibrate`` writes (calibrations-measured/, not the tracked calibrations/),
that its measurements survive an interruption or a failed fit, and the absurd-fit warning.
The sweep is replaced by canned timings: these tests check the plumbing, not the clock."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

import microbench.calibrate as calibrate_mod
from microbench.cli import main

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]
GOOD = [{"kernel": "gemm", "m": m, "n": n, "k": 1024, "dtype": "fp16",
         "time_s": 4e-6 + max(2 * 1024 * n / 1e12, 2 * m * n * 1024 / 1e14)}
        for n in (1024, 2048, 4096) for m in (1, 16, 256, 4096)]
GOOD += [{"kernel": "copy_h2d", "num_bytes": b, "pinned": True, "time_s": 1e-5 + b / 2e10} for b in (1 << 16, 1 << 24, 1 << 28)]
GOOD += [{"kernel": "step", "num_seqs": s, "vocab_size": 32000, "time_s": 1e-4 + s * 1e-7} for s in (1, 8, 64)]


def _noisy(recs: list[dict], kernel: str) -> list[dict]:
    rng = random.Random(0)
    return [{**r, "time_s": r["time_s"] * rng.choice((0.05, 1.0, 20.0))} if r["kernel"] == kernel else r for r in recs]


def fake_sweep(recs: list[dict], *, then: BaseException | None = None):
    def sweep(torch, device, todo, *, quick, show_progress=True, keep=None):
        for r in recs:
            keep(dict(r))
        if then is not None:
            raise then
        return [dict(r) for r in recs]

    return sweep


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


CALIBRATE = ["calibrate", "--device", "cpu", "--model", "tiny-llama", "--no-progress", "--threads", "1"]


def test_default_output_is_calibrations_measured_and_sim_runs_on_it(in_tmp, monkeypatch, capsys) -> None:
    monkeypatch.setattr(calibrate_mod, "run_sweep", fake_sweep(GOOD))
    assert main(CALIBRATE) == 0
    assert not (in_tmp / "calibrations").exists()
    (cal,) = (in_tmp / "calibrations-measured").glob("*.yaml")
    assert cal.name.startswith("cpu-") and cal.with_suffix(".jsonl").is_file()
    lines = [json.loads(x) for x in cal.with_suffix(".jsonl").read_text().splitlines()]
    assert lines[0]["record"] == "device" and lines[1:] == GOOD
    assert yaml.safe_load(cal.read_text())["provenance"]["measurements"] == cal.with_suffix(".jsonl").name
    assert "WARNING" not in capsys.readouterr().err

    from sim.cli.main import main as sim_main

    rc = sim_main(["run", str(REPO / "scenarios" / "chatbot.yaml"), "--set", f"gpu=calibrations-measured/{cal.name}",
                   "--set", "model=tiny-llama", "--set", "workload.num_requests=10", "--set", "engine.max_model_len=1024",
                   "--set", "workload.max_tokens=16", "--out", "run", "--no-report", "--quiet"])
    assert rc == 0 and json.loads((in_tmp / "run" / "summary.json").read_text())["calibration_source"] == "measured"


def test_gitignore_ignores_the_measured_folder() -> None:
    assert "calibrations-measured/" in (REPO / ".gitignore").read_text().splitlines()


def test_an_interrupted_sweep_keeps_its_timings(in_tmp, monkeypatch, capsys) -> None:
    monkeypatch.setattr(calibrate_mod, "run_sweep", fake_sweep(GOOD[:3], then=KeyboardInterrupt()))
    assert main([*CALIBRATE, "--out", "mine/cal.yaml"]) == 130
    assert "the 3 timings so far are in mine/cal.jsonl" in capsys.readouterr().err
    assert len((in_tmp / "mine" / "cal.jsonl").read_text().splitlines()) == 4  # the device record and 3
    assert not (in_tmp / "mine" / "cal.yaml").exists()


def test_a_failed_fit_keeps_the_measurements_and_says_how_to_refit(in_tmp, monkeypatch, capsys) -> None:
    monkeypatch.setattr(calibrate_mod, "run_sweep", fake_sweep([*GOOD, {**GOOD[-1], "kernel": "rmsnorm",
                                                                        "num_tokens": 4, "hidden_size": 8, "dtype": "fp16"}]))
    assert main([*CALIBRATE, "--out", "cal.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cal.jsonl: rmsnorm: need at least 2 records")
    assert "the measurements are kept; microbench fit cal.jsonl -o cal.yaml" in err[0]
    assert len((in_tmp / "cal.jsonl").read_text().splitlines()) == len(GOOD) + 2


def test_absurd_fits_warn_loudly_and_still_write(in_tmp, monkeypatch, capsys) -> None:
    monkeypatch.setattr(calibrate_mod, "run_sweep", fake_sweep(_noisy(GOOD, "gemm")))
    assert main([*CALIBRATE, "--out", "noisy.yaml"]) == 0
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("WARNING:")]
    assert len(err) == 1 and "absurd cross-validated error (MAPE > 50%): gemm " in err[0]
    assert "re-run microbench calibrate on a quiet machine" in err[0] and "copy_h2d" not in err[0]
    assert (in_tmp / "noisy.yaml").is_file() and (in_tmp / "noisy.jsonl").is_file()
    # microbench fit warns the same
    assert main(["fit", "noisy.jsonl", "-o", "refit.yaml"]) == 0
    assert "WARNING: 1 fit(s) with an absurd cross-validated error" in capsys.readouterr().err
    assert (in_tmp / "refit.yaml").is_file()


def test_a_fit_claiming_more_bandwidth_than_the_device_has_is_flagged(capsys) -> None:
    """A CPU fit at 3.7 TB/s (what a --quick run on a 2-core VM once wrote) is outside physics."""
    import dataclasses

    from microbench.checks import unphysical_fits, warn_absurd_fits
    from sim.calib.calibration import load_calibration

    cal = load_calibration("cpu-epyc-2core")
    assert unphysical_fits(cal) == []  # the shipped one, measured with --threads 1: 18 GB/s at most
    gemm = cal.kernels["gemm"]
    fast = dataclasses.replace(gemm, params={**gemm.params, "bandwidth_bytes_per_s": 3.7e12})
    bad = dataclasses.replace(cal, kernels={**cal.kernels, "gemm": fast})
    assert unphysical_fits(bad) == [("gemm", 3.7e12)]
    warn_absurd_fits(bad, Path("x.yaml"))
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("WARNING: the ")]
    assert len(err) == 1 and "the gemm fit claims 3.7 TB/s of memory bandwidth, more than a CPU has" in err[0]
    gpu = dataclasses.replace(bad, gpu_name="NVIDIA H100 80GB HBM3")
    assert unphysical_fits(gpu) == []  # 3.7 TB/s is a GPU's

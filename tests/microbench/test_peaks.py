"""The peak suite (microbench.peaks): GEMM peaks per math mode the device runs, timed on the
CPU at tiny sizes, skipped modes noted in one line, and their fit into ``compute_peaks``
(an achieved peak per mode, bf16 always) and ``dequant`` that loads and changes the cost model."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

import microbench.calibrate as calibrate_mod
import microbench.peaks as peaks_mod
from microbench.cli import main
from microbench.fit import fit
from microbench.peaks import PEAK_KERNELS, fit_precision, gemm_peak_fn, peak_cases, peak_support, weight_only_fn
from microbench.records import check_record, read_jsonl
from sim.calib.calibration import calibration_to_dict, load_calibration
from sim.cost.build import build_cost_model
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model

torch = pytest.importorskip("torch")
CPU = torch.device("cpu")
FLOPS = 1e14  # the synthetic GEMM's compute rate
GOOD = [{"kernel": "gemm", "m": m, "n": n, "k": 1024, "dtype": "bf16",
         "time_s": 4e-6 + max(2 * 1024 * n / 1e12, 2 * m * n * 1024 / FLOPS)}
        for n in (1024, 2048, 4096) for m in (1, 16, 256, 4096)]
GOOD += [{"kernel": "copy_h2d", "num_bytes": b, "pinned": True, "time_s": 1e-5 + b / 2e10} for b in (1 << 16, 1 << 24, 1 << 28)]
GOOD += [{"kernel": "step", "num_seqs": s, "vocab_size": 32000, "time_s": 1e-4 + s * 1e-7} for s in (1, 8, 64)]
DEVICE = {"name": "test-gpu", "gpu_name": "Test GPU", "memory_bytes": 80 << 30, "provenance": {"cuda": "12.4"}}


def _int_mm_runs_on_cpu() -> bool:
    try:
        torch._int_mm(torch.ones(32, 32, dtype=torch.int8), torch.ones(32, 32, dtype=torch.int8))
    except Exception:  # noqa: BLE001
        return False
    return True


def _peak(mode: str, s: int, flops: float) -> dict:
    return {"kernel": "gemm_peak", "m": s, "n": s, "k": s, "mode": mode, "time_s": 2 * s ** 3 / flops}


def test_cpu_calibrate_measures_peaks_and_writes_a_loadable_compute_peaks(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(peaks_mod.PEAK_SIZES, "cpu", (32, 64))
    real = calibrate_mod.run_sweep

    def sweep(torch_, device, todo, *, quick, show_progress=True, keep=None):  # canned kernels, real peaks
        for r in GOOD:
            keep(dict(r))
        peaks = [(k, s) for k, s in todo if k in PEAK_KERNELS]
        return [dict(r) for r in GOOD] + real(torch_, device, peaks, quick=quick, show_progress=False, keep=keep)

    monkeypatch.setattr(calibrate_mod, "run_sweep", sweep)
    out = tmp_path / "cpu.yaml"
    assert main(["calibrate", "--device", "cpu", "--quick", "--model", "tiny-llama", "--no-progress",
                 "--threads", "1", "--out", str(out)]) == 0
    text = capsys.readouterr()
    assert "Traceback" not in text.out + text.err
    assert "compute peak fp8: skipped (fp8 GEMMs are measured on CUDA only" in text.out
    assert "compute peak fp16-acc16: skipped" in text.out and "dequant int8: skipped" in text.out
    assert "compute peaks" in text.out and "TFLOP/s" in text.out
    records, _ = read_jsonl(out.with_suffix(".jsonl"))
    peaks = [r for r in records if r["kernel"] == "gemm_peak"]
    modes = {r["mode"] for r in peaks}
    assert {"bf16", "fp16"} <= modes and "fp8" not in modes and "fp16-acc16" not in modes
    assert ("int8" in modes) == _int_mm_runs_on_cpu()
    for r in peaks:
        assert {"m", "n", "k", "mode", "time_s"} <= set(r) and r["time_s"] > 0 and r["m"] in (32, 64)
    last = json.loads(out.with_suffix(".jsonl").read_text().splitlines()[-1])
    assert last["kernel"] == "gemm_peak"  # the peak suite runs last
    cal = load_calibration(str(out), key="gpu")
    assert cal.precision is not None and cal.precision.compute_peaks["bf16"] > 0
    assert cal.precision.dequant is None
    best = max(2 * r["m"] ** 3 / r["time_s"] for r in peaks if r["mode"] == "bf16")
    assert cal.precision.compute_peaks["bf16"] == pytest.approx(best, rel=1e-5)
    data = yaml.safe_load(out.read_text())
    assert set(data["compute_peaks"]) == modes and "achieved" in data["provenance"]["compute_peaks"]


def test_unsupported_modes_are_skipped_with_one_line_notes(monkeypatch) -> None:
    modes, dequant, notes = peak_support(torch, CPU)
    assert modes[:2] == ["bf16", "fp16"] and "fp8" not in modes and "fp4" not in modes and not dequant
    assert all("\n" not in n for n in notes)
    assert any(n.startswith("compute peak fp4: skipped (fp4 (NVFP4) GEMMs are not measured") for n in notes)

    def broken(*_a, **_k):
        raise RuntimeError("no int8 GEMM on this device\nsecond line")

    monkeypatch.setattr(torch, "_int_mm", broken)
    modes, _, notes = peak_support(torch, CPU)
    assert "int8" not in modes
    assert "compute peak int8: skipped (RuntimeError: no int8 GEMM on this device)" in notes
    assert peak_cases("cpu", [], False) == []


def test_cuda_cases_use_large_gemms_and_weight_only_gemvs() -> None:
    todo = peak_cases("cuda", ["bf16", "fp8"], True)
    assert ("gemm_peak", dict(m=8192, n=8192, k=8192, mode="fp8")) in todo
    gemv = [s for k, s in todo if k == "weight_only_gemv"]
    assert {s["dtype"] for s in gemv} == {"bf16", "int8"} and all(s["m"] <= 16 for s in gemv)


@pytest.mark.parametrize("mode", ["bf16", "fp16", "fp16-acc16", "fp8", "int8"])
def test_every_mode_builds_a_gemm_of_the_right_shape(mode) -> None:
    """The CUDA-only modes' calls, checked where torch runs them on the CPU (their signatures)."""
    fn = gemm_peak_fn(torch, mode, 32, 48, 64, CPU, torch.Generator().manual_seed(0))
    try:
        out = fn()
    except (RuntimeError, NotImplementedError) as exc:
        pytest.skip(f"{mode} does not run on this CPU: {exc}")
    assert tuple(out.shape) == (32, 48)
    assert torch.backends.cuda.matmul.allow_fp16_accumulation is False  # restored after the call


def test_weight_only_gemv_builds_on_the_cpu() -> None:
    gen = torch.Generator().manual_seed(0)
    for dtype in ("bf16", "int8"):
        try:
            out = weight_only_fn(torch, dtype, 2, 64, 128, CPU, gen)()
        except (RuntimeError, NotImplementedError) as exc:
            pytest.skip(f"{dtype} weight-only GEMV does not run here: {exc}")
        assert tuple(out.shape) == (2, 64)


def test_synthetic_fp8_at_twice_bf16_speeds_up_a_compute_bound_prefill(tmp_path) -> None:
    recs = GOOD + [_peak("bf16", s, FLOPS * f) for s, f in ((4096, 0.9), (8192, 1.0))]
    recs += [_peak("fp8", s, 2 * FLOPS * f) for s, f in ((4096, 1.0), (8192, 0.95))]
    cal = fit(recs, device=DEVICE, name="peaks")
    assert cal.precision.compute_peaks["bf16"] == pytest.approx(FLOPS)
    assert cal.precision.compute_peaks["fp8"] == pytest.approx(2 * FLOPS)
    out = tmp_path / "peaks.yaml"
    out.write_text(yaml.safe_dump(calibration_to_dict(cal), sort_keys=False))
    loaded = load_calibration(str(out), key="gpu")
    assert loaded.precision.compute_peaks["fp8"] == pytest.approx(2 * loaded.precision.compute_peaks["bf16"], rel=1e-5)
    model = load_model("llama-3-8b", source="test", key="model")
    shape = BatchShape.prefill(8192)
    bf16 = build_cost_model(model, loaded, compute_dtype="bf16").step_time_s(shape)
    fp8 = build_cost_model(model, loaded, weight_dtype="fp8", weight_dtype_bytes=1,
                           compute_dtype="fp8").step_time_s(shape)
    assert fp8 < 0.8 * bf16
    legacy = build_cost_model(model, dataclasses.replace(loaded, precision=None)).step_time_s(shape)
    assert bf16 == pytest.approx(legacy, rel=1e-9)  # bf16 runs at the fitted GEMM's throughput, as before
    with pytest.raises(ConfigError, match=r"compute_peaks\.int8"):
        build_cost_model(model, loaded, compute_dtype="int8")


def test_bf16_is_written_even_when_only_another_mode_was_measured() -> None:
    p, prov = fit_precision([_peak("int8", 1024, 3e14)], peak_flops=1e14, file="x")
    assert p.compute_peaks == {"bf16": 1e14, "int8": pytest.approx(3e14)}
    assert "bf16 not measured: peak_flops" in prov["compute_peaks"]
    assert fit_precision(GOOD, peak_flops=1e14, file="x") == (None, {})


def test_weight_only_records_fit_dequant_int8(tmp_path) -> None:
    gemv = []
    for n in (4096, 8192):
        t_bf16 = 2 * n * n / 3e12
        gemv += [{"kernel": "weight_only_gemv", "m": 1, "n": n, "k": n, "dtype": "bf16", "time_s": t_bf16},
                 {"kernel": "weight_only_gemv", "m": 1, "n": n, "k": n, "dtype": "int8", "time_s": t_bf16 / 2 / 0.8}]
    cal = fit(GOOD + gemv, device=DEVICE, name="dq")
    assert cal.precision.dequant == {"int8": pytest.approx(0.8)} and not cal.precision.has_compute_peaks
    assert cal.precision.dequant_source.startswith("measured by microbench")
    out = tmp_path / "dq.yaml"
    out.write_text(yaml.safe_dump(calibration_to_dict(cal), sort_keys=False))
    data = yaml.safe_load(out.read_text())
    assert "compute_peaks" not in data and data["dequant"]["int8"] == pytest.approx(0.8)
    assert load_calibration(str(out), key="gpu").precision.weight_read_efficiency("int8") == pytest.approx(0.8)
    fast = fit_precision([dict(r, time_s=r["time_s"] / 3) if r["dtype"] == "int8" else r for r in gemv],
                         peak_flops=1e14, file="x")[0]
    assert fast.dequant["int8"] == 1.0  # at most the bf16 GEMV's bandwidth


def test_peak_records_are_checked() -> None:
    rec = _peak("fp8", 64, 1e12)
    assert check_record(rec, file="m.jsonl", where="line 1") is rec
    with pytest.raises(ConfigError, match=r"line 2\.mode: got 'fp6'; allowed: bf16, fp16"):
        check_record(dict(rec, mode="fp6"), file="m.jsonl", where="line 2")
    with pytest.raises(ConfigError, match=r"line 3\.k: expected a number in \[0, 1e\+13\]"):
        check_record({k: v for k, v in rec.items() if k != "k"}, file="m.jsonl", where="line 3")
    gemv = {"kernel": "weight_only_gemv", "m": 1, "n": 64, "k": 64, "dtype": "int3", "time_s": 1e-6}
    with pytest.raises(ConfigError, match=r"line 4\.dtype: got 'int3'"):
        check_record(gemv, file="m.jsonl", where="line 4")


def test_fit_cli_refits_peaks(tmp_path, capsys) -> None:
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in [{"record": "device", **DEVICE}, *GOOD,
                                                        _peak("bf16", 4096, FLOPS), _peak("fp8", 4096, 2 * FLOPS)]))
    out = tmp_path / "m.yaml"
    assert main(["fit", str(jsonl), "-o", str(out)]) == 0
    assert "compute peaks       achieved bf16 100, fp8 200 TFLOP/s" in capsys.readouterr().out
    assert load_calibration(str(out), key="gpu").precision.speedup("fp8") == pytest.approx(2.0, rel=1e-5)


def test_records_module_still_reads_old_files() -> None:
    shipped = Path(__file__).resolve().parents[2] / "calibrations" / "cpu-epyc-2core.jsonl"
    records, device = read_jsonl(shipped)
    assert device is not None and not any(r["kernel"] in PEAK_KERNELS for r in records)


def test_a_peak_case_failing_in_the_sweep_is_skipped_and_the_sweep_goes_on(monkeypatch, capsys) -> None:
    import microbench.cases as cases_mod  # noqa: PLC0415

    real = cases_mod.make_peak_fn

    def flaky(torch_, kernel, shape, device, gen):
        if shape.get("mode") == "fp16":
            raise MemoryError("out of memory at 64x64x64\nmore")
        return real(torch_, kernel, shape, device, gen)

    monkeypatch.setattr(cases_mod, "make_peak_fn", flaky)
    todo = [("gemm_peak", dict(m=64, n=64, k=64, mode=m)) for m in ("bf16", "fp16")]
    records = calibrate_mod.run_sweep(torch, CPU, todo, quick=True, show_progress=False)
    assert [r["mode"] for r in records] == ["bf16"]
    assert "gemm_peak {'m': 64, 'n': 64, 'k': 64, 'mode': 'fp16'}: skipped (MemoryError: out of memory at 64x64x64)" \
        in capsys.readouterr().err
    with pytest.raises(KeyError):  # any other kernel's failure still stops the sweep
        calibrate_mod.run_sweep(torch, CPU, [("gemm", dict(m=1, n=8))], quick=True, show_progress=False)

"""microbench import aiconfigurator: NVIDIA's kernel tables -> kvsim records -> a device-timed calibration.

The conversion, the version choice, the fit and the CLI run here on tables written as the
package lays them out (rows generated from a known roofline, so the fit has something to
recover); only pandas' parquet reader is replaced (the [import] extra is not in the test venv).
The last test reads the real package where it is installed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

import microbench.aiconfigurator as aic
from microbench.cli import main
from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration
from sim.errors import ConfigError

BW, FLOPS, FLOOR = 2.0e12, 6.0e14, 4e-6  # the generating roofline: bytes/s, FLOP/s, seconds


def _gemm_ms(m, n, k, dtype="bfloat16"):
    b = 1 if dtype == "fp8" else 2
    rate = FLOPS * (2 if dtype == "fp8" else 1)
    return 1e3 * (FLOOR + max((m * k + k * n + m * n) * b / BW, 2.0 * m * n * k / rate))


def _attn_ms(batch, q, ctx, heads, kv_heads, dim):
    nbytes = batch * ((ctx + q) * 2 * kv_heads + 2 * q * heads) * dim * 2
    flops = 4.0 * heads * dim * batch * q * (ctx + (q + 1) / 2)
    return 1e3 * (FLOOR + max(nbytes / BW, flops / FLOPS))


def _gemm_rows():
    rows = []
    for n in (1024, 4096, 8192):
        for k in (1024, 4096, 8192):
            for m in (1, 4, 16, 64, 256, 1024, 4096, 8192):
                for dtype, source in (("bfloat16", "torch.nn.functional.linear"), ("fp8", "Cutlass")):
                    rows.append({"kernel_source": source, "gemm_dtype": dtype, "m": m, "n": n, "k": k,
                                 "latency": _gemm_ms(m, n, k, dtype), "device": "NVIDIA Test GPU"})
                if m == 64:  # a second bf16 kernel with fewer rows: not the default lane
                    rows.append({"kernel_source": "other", "gemm_dtype": "bfloat16", "m": m, "n": n, "k": k,
                                 "latency": 99.0, "device": "NVIDIA Test GPU"})
    rows.append({"kernel_source": "DeepGemm", "gemm_dtype": "fp8_block", "m": 1, "n": 1024, "k": 1024,
                 "latency": 0.01, "device": "NVIDIA Test GPU"})
    return rows


def _attn_rows(generation: bool):
    rows = []
    for batch in (1, 4, 16, 64):
        for heads, kv_heads in ((32, 8), (64, 8), (16, 16)):
            for dim in (64, 128):
                for length in (16, 128, 1024, 4096):
                    isl, step = (1, length - 1) if generation else (length, 0)
                    q, ctx = (1, length - 1) if generation else (length, 0)
                    base = {"batch_size": batch, "isl": isl, "num_heads": heads, "num_key_value_heads": kv_heads,
                            "head_dim": dim, "beam_width": 1, "step": step, "window_size": 0,
                            "device": "NVIDIA Test GPU", "kernel_source": "fa3"}
                    rows.append({**base, "kv_cache_dtype": "bfloat16",
                                 "latency": _attn_ms(batch, q, ctx, heads, kv_heads, dim)})
                    rows.append({**base, "kv_cache_dtype": "fp8", "latency": 1.0})
                    rows.append({**base, "kv_cache_dtype": "bfloat16", "window_size": 128, "latency": 1.0})
    return rows


@pytest.fixture
def fake_package(tmp_path: Path, monkeypatch) -> Path:
    """systems/data/h100_sxm/<op>/vllm/<version>/<table> as JSON rows; read_table reads them."""
    root = tmp_path / "data"
    layout = {"gemm_perf.parquet": ("gemm", ("0.20.0", "0.24.0"), _gemm_rows()),
              "context_attention_perf.parquet": ("attention", ("0.24.0",), _attn_rows(False)),
              "generation_attention_perf.parquet": ("attention", ("0.24.0", "0.3.0"), _attn_rows(True))}
    for table, (op, versions, rows) in layout.items():
        for v in versions:
            d = root / "h100_sxm" / op / "vllm" / v
            d.mkdir(parents=True, exist_ok=True)
            (d / table).write_text(json.dumps(rows))
    monkeypatch.setattr(aic, "data_root", lambda: root)
    monkeypatch.setattr(aic, "read_table", lambda path: json.loads(Path(path).read_text()))
    return root


def test_gemm_rows_become_bf16_gemm_records_and_peak_records_in_seconds() -> None:
    c = aic.convert("gemm_perf.parquet", _gemm_rows())
    gemm = [r for r in c.records if r["kernel"] == "gemm"]
    peaks = [r for r in c.records if r["kernel"] == "gemm_peak"]
    assert len(gemm) == 3 * 3 * 8 and all(r["dtype"] == "bf16" and r["impl"] == "torch.nn.functional.linear"
                                          for r in gemm)
    r = next(r for r in gemm if (r["m"], r["n"], r["k"]) == (1, 4096, 4096))
    assert r["time_s"] == pytest.approx(_gemm_ms(1, 4096, 4096) / 1e3)  # milliseconds -> seconds
    assert {p["mode"] for p in peaks} == {"bf16", "fp8"}
    assert all(min(p["m"], p["n"], p["k"]) >= aic.PEAK_MIN_DIM for p in peaks)
    assert c.skipped["kernel other (bfloat16)"] == 9 and c.skipped["gemm_dtype fp8_block"] == 1
    assert c.sources == {"bf16": "torch.nn.functional.linear", "fp8": "Cutlass"}


def test_attention_rows_map_to_kvsim_shapes_and_drop_windows_and_fp8_kv() -> None:
    dec = aic.convert("generation_attention_perf.parquet", _attn_rows(True))
    pre = aic.convert("context_attention_perf.parquet", _attn_rows(False))
    assert {r["kernel"] for r in dec.records} == {"decode_attention"}
    assert {r["context_len"] for r in dec.records} == {16, 128, 1024, 4096}  # isl + step: the KV length
    assert all(r["block_size"] == aic.DECODE_BLOCK_SIZE and r["dtype"] == "bf16" for r in dec.records)
    assert {r["query_len"] for r in pre.records} == {16, 128, 1024, 4096}
    assert all(r["context_len"] == 0 for r in pre.records)
    n = 4 * 3 * 2 * 4
    assert len(dec.records) == len(pre.records) == n
    assert dec.skipped["sliding window or beam search"] == n
    assert dec.skipped["kv_cache_dtype fp8 (the fit is on bf16 KV)"] == n


def test_bad_latencies_are_counted_not_kept() -> None:
    rows = _gemm_rows()[:3]
    rows[0]["latency"], rows[1]["latency"] = float("nan"), -1.0
    c = aic.convert("gemm_perf.parquet", rows)
    assert c.skipped["latency not a positive number"] == 2 and len(c.records) == 1


def test_versions_newest_common_or_as_asked(fake_package: Path) -> None:
    assert set(aic.choose_versions(fake_package, "h100_sxm", "vllm", None).values()) == {"0.24.0"}
    with pytest.raises(ConfigError) as e:
        aic.choose_versions(fake_package, "h100_sxm", "vllm", "0.20.0")
    assert e.value.key == "--version" and "context_attention_perf.parquet" in e.value.message
    with pytest.raises(ConfigError) as e:
        aic.choose_versions(fake_package, "h100_sxm", "sglang", None)
    assert e.value.key == "--backend"
    with pytest.raises(ConfigError) as e:
        aic.choose_versions(fake_package, "h900", "vllm", None)
    assert e.value.key == "--system"
    assert aic._version_key("0.5.14") > aic._version_key("0.5.6.post2") > aic._version_key("0.5.6")


def test_fit_recovers_the_roofline_and_takes_the_rest_from_the_datasheet(fake_package: Path) -> None:
    records, device, _ = aic.import_records("h100_sxm", "vllm")
    base = load_calibration("h100-sxm")
    cal = aic.build_calibration(records, device, base, folds=3)
    assert cal.kernel_timing == "device" and cal.name == "h100-sxm@vllm"
    assert cal.gpu_name == "NVIDIA Test GPU" and cal.memory_bytes == base.memory_bytes
    assert set(cal.kernels) == {"gemm", "prefill_attention", "decode_attention"}
    for kernel in cal.kernels.values():  # generated from one roofline: the held-out shapes are predicted
        assert kernel.cv_mape is not None and kernel.cv_mape < 0.10, kernel
    assert cal.predict("gemm", m=1, n=4096, k=4096, dtype="bf16") == pytest.approx(
        _gemm_ms(1, 4096, 4096) / 1e3, rel=0.15)
    assert cal.precision.compute_peaks["fp8"] / cal.precision.compute_peaks["bf16"] == pytest.approx(2.0, rel=0.05)
    assert (cal.kernel_launch_s, cal.step_overhead_s, cal.pcie_bandwidth_bytes_per_s) == (
        base.kernel_launch_s, base.step_overhead_s, base.pcie_bandwidth_bytes_per_s)
    assert cal.interconnect == base.interconnect  # tensor parallelism keeps the datasheet's links
    for kernel in aic.DATASHEET_KERNELS:
        assert kernel in cal.provenance["datasheet"]
    assert "aiconfigurator-core" in cal.provenance["source"] and "vllm 0.24.0" in cal.provenance["framework"]
    again = calibration_from_dict(calibration_to_dict(cal), file="x.yaml")
    assert again.kernel_timing == "device"
    assert again.kernels["gemm"].params == pytest.approx(cal.kernels["gemm"].params, rel=1e-5)  # 6 digits kept


def test_cli_import_then_sim_run_with_the_report(fake_package: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "cal" / "h100-sxm@vllm.yaml"
    assert main(["import", "aiconfigurator", "--system", "h100_sxm", "--out", str(out), "--folds", "3",
                 "--keep-jsonl"]) == 0
    text = capsys.readouterr().out
    assert "gemm_perf.parquet" in text and "cv MAPE" in text and f"wrote {out}" in text
    data = yaml.safe_load(out.read_text())
    assert data["kernel_timing"] == "device" and data["source"] == "measured"
    lines = out.with_suffix(".jsonl").read_text().splitlines()
    assert json.loads(lines[0])["record"] == "device" and len(lines) > 100
    # the user path: a scenario on the imported calibration, report included
    from sim.cli.main import main as sim_main
    root = Path(__file__).resolve().parents[2]
    run = tmp_path / "run"
    assert sim_main(["run", str(root / "scenarios" / "chatbot.yaml"), "--set", f"gpu={out}",
                     "--set", "workload.num_requests=60", "--out", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert (run / "report.html").stat().st_size > 10_000
    assert summary["calibration_source"] == "measured"


def test_cli_bad_input_is_one_line_exit_2(fake_package: Path, tmp_path: Path, capsys) -> None:
    assert main(["import", "aiconfigurator", "--system", "z80", "--out", str(tmp_path / "a.yaml")]) == 2
    assert main(["import", "aiconfigurator", "--system", "h100_sxm", "--backend", "vllm", "--version", "9",
                 "--out", str(tmp_path / "b.yaml")]) == 2
    assert main(["import", "aiconfigurator", "--system", "h100_sxm", "--out", str(tmp_path / "c.txt")]) == 2
    assert main(["import", "aiconfigurator", "--system", "h100_sxm", "--backend", "tgi",
                 "--out", str(tmp_path / "d.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: <cli>: --") for line in err)
    assert "--backend: got 'tgi'; allowed: vllm, sglang, trtllm" in err[3]


def test_kernel_timing_key_is_checked() -> None:
    data = calibration_to_dict(load_calibration("h100-sxm"))
    data |= {"schema": 2, "kernel_timing": "wallclock"}
    with pytest.raises(ConfigError) as e:
        calibration_from_dict(data, file="x.yaml")
    assert e.value.key == "kernel_timing" and "engine, device" in e.value.message


def test_device_timing_puts_the_profile_around_the_fitted_kernels(fake_package: Path) -> None:
    from sim.cost.build import build_profiled_cost
    from sim.cost.profile import PROFILES
    from sim.cost.profiled import ProfiledCost
    from sim.cost.shape import BatchShape
    from sim.model.hf_config import load_model

    records, device, _ = aic.import_records("h100_sxm", "vllm")
    cal = aic.build_calibration(records, device, load_calibration("h100-sxm"), folds=2)
    model, profile = load_model("llama-3-8b"), PROFILES["vllm-v1"]
    device_timed = build_profiled_cost(model, cal, profile, max_num_seqs=256)
    import dataclasses
    as_engine = build_profiled_cost(model, dataclasses.replace(cal, kernel_timing="engine"), profile,
                                    max_num_seqs=256)
    assert isinstance(device_timed, ProfiledCost) and not isinstance(as_engine, ProfiledCost)
    shape = BatchShape(num_seqs=8, num_prefill_tokens=0, num_decode_tokens=8, decode_kv_tokens=8 * 1000,
                       prefill_attn_pairs=0.0, prefill_kv_tokens=0)
    host, step = device_timed.host_time_s(shape), device_timed.step_time_s(shape)
    assert host == pytest.approx(profile.step_host_s + 8 * profile.seq_host_s, rel=0.2) and host > 0
    assert math.isfinite(step) and step >= host  # the profile's host time is charged (async: the larger)
    assert device_timed.device_time_s(shape) > 0

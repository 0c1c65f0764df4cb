"""Calibration files: the shipped datasheets load; bad files name the file and key path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.calib.calibration import (
    Calibration, CalibrationSource, available_calibrations, calibration_dirs, load_calibration)
from sim.errors import ConfigError

SHIPPED = ["a10", "a10g", "a100-40gb", "a100-80gb", "b200", "h100-nvl", "h100-pcie", "h100-sxm", "h20", "h200",
           "l4", "l40", "l40s", "mi300x", "rtx-3090", "rtx-4060-8gb", "rtx-4090", "rtx-a6000", "t4", "v100-sxm2-32gb"]
REPO_CALIBRATIONS = Path(__file__).resolve().parents[3] / "calibrations"


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_datasheets_load(name: str) -> None:
    cal = load_calibration(name)
    assert cal.name == name and cal.source is CalibrationSource.DATASHEET and cal.schema == 1
    # achieved fractions: HBM cards 0.75-0.85; the RTX 4090's GDDR6X is measured at 0.89-0.92 of its peak
    assert 0.75 <= cal.bandwidth_efficiency <= 0.92 and 0.45 <= cal.compute_eff_max <= 0.95
    assert {"bandwidth", "flops", "memory", "pcie"} <= set(cal.provenance)
    assert name in available_calibrations()


def test_datasheet_numbers() -> None:
    h100 = load_calibration("h100-sxm")
    assert (h100.hbm_bandwidth_bytes_per_s, h100.peak_flops) == (3.35e12, 989e12)
    # memory_bytes is what CUDA reports as the total: the nominal size less 0.2 GiB and 0.75%
    # (vLLM logs: 79.11-79.33 GiB on 80 GiB cards, 39.50 GiB on an A100 40GB)
    for name, nominal_gib, reported_gib in (("h100-sxm", 80, 79.20), ("a100-80gb", 80, 79.20),
                                            ("a100-40gb", 40, 39.50), ("rtx-4060-8gb", 8, 7.74)):
        memory = load_calibration(name).memory_bytes
        assert memory < nominal_gib << 30 and abs(memory / (1 << 30) - reported_gib) < 0.01, name
    assert load_calibration("a100-80gb").hbm_bandwidth_bytes_per_s == 2.039e12
    # measured totals where a public log gives one (torch / deviceQuery / rocm-smi)
    for name, total in (("a10", 23609475072), ("l4", 23612293120), ("h20", 97285 << 20),
                        ("b200", 182631 << 20), ("mi300x", 205822885888)):
        assert load_calibration(name).memory_bytes == total, name
    # datasheet peaks: dense, half the sparse figures the datasheets print
    for name, bw, bf16, fp8 in (("h100-pcie", 2.0e12, 756e12, 1513e12), ("h100-nvl", 3.9e12, 835.5e12, 1670.5e12),
                                ("b200", 8.0e12, 2250e12, 4500e12), ("l4", 3.0e11, 121e12, 242.5e12),
                                ("mi300x", 5.3e12, 1307.4e12, 2614.9e12)):
        cal = load_calibration(name)
        assert (cal.hbm_bandwidth_bytes_per_s, cal.peak_flops, cal.precision.compute_peaks["fp8"]) == (bw, bf16, fp8), name
    for name in ("t4", "v100-sxm2-32gb"):  # pre-Ampere: no bf16; a bf16 model runs at the fp16 rate
        cal = load_calibration(name)
        assert cal.peak_flops == cal.precision.compute_peaks["fp16"] and "compute capability" in cal.provenance["flops"]
    for name in ("a10", "a10g", "rtx-3090", "rtx-a6000", "t4", "v100-sxm2-32gb"):  # no fp8 tensor cores
        assert "fp8" not in load_calibration(name).precision.compute_peaks, name


# Square bf16 matmul TFLOP/s per GPU, zzc0721/torch-performance-test-data database.md (the
# rows each calibration's provenance cites), and each GPU's dense bf16 peak.
SQUARE_MATMUL = {"a100-80gb": ([264.53], 312), "h100-sxm": ([789.24, 783.66], 989), "h200": ([790.29], 989),
                 "l40s": ([269.15], 362), "rtx-4090": ([170.06, 173.31, 162.39, 163.09], 165.2),
                 "rtx-3090": ([76.34, 76.68, 76.58], 71), "rtx-a6000": ([123.34], 154.8), "h20": ([141.86], 148),
                 "b200": ([1696.03], 2250), "a10g": ([69.47], 70),
                 # pre-Ampere: the fp16 column (their bf16 is emulated); the V100S row for the V100 SXM2
                 "t4": ([41.91, 42.71], 65), "v100-sxm2-32gb": ([88.92 * 125 / 130], 125)}


@pytest.mark.parametrize("name", sorted(set(SQUARE_MATMUL) - {"a100-80gb"}))
def test_eff_max_follows_the_cross_gpu_matmul_table(name: str) -> None:
    """eff_max = the A100-80GB's (fitted on its real linear layers) scaled by this GPU's share of
    peak in the same square-matmul benchmark, so GPUs are ranked by one measurement."""
    a100 = load_calibration("a100-80gb")
    a100_share = sum(SQUARE_MATMUL["a100-80gb"][0]) / SQUARE_MATMUL["a100-80gb"][1]
    rows, peak = SQUARE_MATMUL[name]
    cal = load_calibration(name)
    assert cal.peak_flops == pytest.approx(peak * 1e12)
    expected = a100.compute_eff_max / a100_share * (sum(rows) / len(rows)) / peak
    assert cal.compute_eff_max == pytest.approx(expected, abs=0.005)
    assert "torch-performance-test-data" in cal.provenance["efficiencies"]


def test_compute_efficiency_saturates() -> None:
    cal = load_calibration("h100-sxm")
    m_half = cal.compute_m_half_tokens
    assert cal.compute_efficiency(0) == 0
    assert cal.compute_efficiency(m_half) == pytest.approx(cal.compute_eff_max / 2)
    assert cal.compute_efficiency(1e9) == pytest.approx(cal.compute_eff_max)
    assert cal.effective_bandwidth_bytes_per_s == pytest.approx(3.35e12 * 0.83)


def _write(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load((REPO_CALIBRATIONS / "h100-sxm.yaml").read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_load_by_path_and_scientific_strings(tmp_path: Path) -> None:
    path = _write(tmp_path, peak_flops="989e12", provenance=None)
    cal = load_calibration(str(path))
    assert isinstance(cal, Calibration) and cal.peak_flops == 989e12 and cal.provenance == {}


@pytest.mark.parametrize(("changes", "key", "fragment"), [
    ({"kernels": {}}, "kernels", "unknown key; allowed: schema, name"),
    ({"peak_flops": "fast"}, "peak_flops", "expected a number"),
    ({"peak_flops": -1}, "peak_flops", "must be > 0"),
    ({"memory_bytes": 1.5}, "memory_bytes", "expected an integer"),
    ({"bandwidth_efficiency": 1.2}, "bandwidth_efficiency", "must be in (0, 1]"),
    ({"source": "guess"}, "source", "allowed: datasheet, measured"),
    ({"schema": 3}, "schema", "unsupported schema 3"),
    ({"step_overhead_s": None}, "step_overhead_s", "required key missing"),
    ({"compute_efficiency": {"eff_max": 0.7}}, "compute_efficiency.m_half_tokens", "required key missing"),
    ({"compute_efficiency": {"eff_max": 0.7, "m_half_tokens": 8, "k": 1}}, "compute_efficiency.k", "unknown key"),
    ({"compute_efficiency": {"eff_max": True, "m_half_tokens": 8}}, "compute_efficiency.eff_max", "expected a number"),
    ({"gpu_name": ""}, "gpu_name", "non-empty string"),
])
def test_bad_files_name_file_and_key_path(tmp_path: Path, changes: dict, key: str, fragment: str) -> None:
    path = _write(tmp_path, **changes)
    with pytest.raises(ConfigError) as err:
        load_calibration(str(path))
    assert err.value.file == str(path) and err.value.key == key
    assert fragment in err.value.message
    assert str(err.value).startswith(f"{path}: {key}: ")


def test_unknown_name_and_malformed_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^<cli>: --gpu: unknown GPU calibration 'tpu-v5e'; use one of: .*h100-sxm"):
        load_calibration("tpu-v5e", key="--gpu")
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: [1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line 2: malformed YAML"):
        load_calibration(str(bad))
    bad.write_text("- 1\n")
    with pytest.raises(ConfigError, match="<root>: a calibration must be a YAML mapping"):
        load_calibration(str(bad))


def test_current_directory_shadows_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "calibrations"
    local.mkdir()
    data = yaml.safe_load((REPO_CALIBRATIONS / "h100-sxm.yaml").read_text())
    data["step_overhead_s"] = 0.5
    (local / "h100-sxm.yaml").write_text(yaml.safe_dump(data))
    (local / "my-gpu.yaml").write_text(yaml.safe_dump(data | {"name": "my-gpu"}))
    monkeypatch.chdir(tmp_path)
    assert calibration_dirs()[0] == local
    assert load_calibration("h100-sxm").step_overhead_s == 0.5
    assert "my-gpu" in available_calibrations() and "a100-80gb" in available_calibrations()


def test_schema_2_round_trips_with_fitted_kernels(tmp_path: Path) -> None:
    from sim.calib.calibration import calibration_from_dict, calibration_to_dict

    cal = load_calibration("cpu-epyc-2core")
    assert cal.schema == 2 and cal.source is CalibrationSource.MEASURED and "gemm" in cal.kernels
    again = calibration_from_dict(yaml.safe_load(yaml.safe_dump(calibration_to_dict(cal))), file="x")
    shape = dict(m=48, n=2048, k=1536, dtype="bf16")
    assert again.predict("gemm", **shape) == pytest.approx(cal.predict("gemm", **shape), rel=1e-5)
    assert again.kernels["gemm"].cv_mape == pytest.approx(cal.kernels["gemm"].cv_mape, rel=1e-5)
    assert cal.source_label == f"measured {cal.provenance['date'][:10]}"
    assert load_calibration("a100-80gb").source_label == "datasheet"


def test_bad_kernel_section_names_the_key(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO_CALIBRATIONS / "cpu-epyc-2core.yaml").read_text())
    data["kernels"]["gemm"]["params"]["bandwidth_bytes_per_s"] = "fast"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_calibration(str(path))
    assert err.value.key == "kernels.gemm.params.bandwidth_bytes_per_s"
    data["schema"] = 1
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="unknown key"):
        load_calibration(str(path))


@pytest.mark.parametrize("axis", [[0, 16], [16, 16], [-4, 16]])
def test_a_grid_axis_at_zero_or_repeated_is_refused_naming_the_row(axis) -> None:
    # log-log interpolation divides by log(x1 / x0): an axis value 0 or a repeated one once ended
    # in a ZeroDivisionError at the first prediction (issue #42)
    from sim.calib.kernel_models import kernel_fit_from_dict

    params = {"bandwidth_bytes_per_s": 1e12, "flops_per_s": 1e14, "x_half": 8.0, "overhead_s": 5e-6,
              "item_s": 0.0, "sharpness": 1.5}
    row = {"n": 4096, "k": 4096, "dtype": "bf16", "m": axis, "time_s": [1e-5, 2e-5]}
    with pytest.raises(ConfigError) as exc:
        kernel_fit_from_dict("gemm", {"params": params, "grid": [row]}, file="cal.yaml")
    assert exc.value.key == "kernels.gemm.grid[0]" and "strictly ascending" in exc.value.message

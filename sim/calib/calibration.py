"""GPU calibrations: the hardware numbers the cost model turns into seconds.

A calibration is a small YAML file (schema 1, documented in each shipped file's header):

    schema: 1
    name: h100-sxm
    source: datasheet               # datasheet | measured
    gpu_name: NVIDIA H100 80GB HBM3
    memory_bytes: 85899345920       # total device memory
    hbm_bandwidth_bytes_per_s: 3.35e+12   # peak memory bandwidth
    bandwidth_efficiency: 0.83      # achieved fraction of peak, in (0, 1]
    peak_flops: 9.89e+14            # dense bf16/fp16 tensor-core FLOP/s
    compute_efficiency:             # efficiency(m) = eff_max * m / (m + m_half_tokens)
      eff_max: 0.7                  # in (0, 1]
      m_half_tokens: 32             # GEMM rows (tokens) at which half of eff_max is reached
    pcie_bandwidth_bytes_per_s: 5.0e+10   # host<->device pinned copies, achieved
    kernel_launch_s: 4.0e-6         # per kernel
    step_overhead_s: 2.0e-3         # per engine step: scheduler, sampling, Python
    gemm_fixed_s: 6.2e-6            # optional (0): a GEMM kernel's device time besides its reads and math
    provenance: {key: text, ...}    # optional: where the numbers come from

Every key but ``provenance`` and ``gemm_fixed_s`` is required; unknown keys are rejected.
Numbers written as ``1e12`` (which YAML 1.1 reads as a string) are accepted.

Schema 2 (written by ``microbench fit``) adds an optional ``kernels:`` mapping of fitted
kernel models, ``{gemm: {params: {...}, cv_mape, grid: [...]}, decode_attention: ...}``
(see sim/calib/kernel_models.py); the scalar keys above then hold the fitted copy bandwidth,
GEMM throughput, PCIe rate and overheads, so code that reads only them keeps working.
It may also hold ``composition:``, the correction from the kernel sum to a measured
engine step (sim/calib/composition.py). Either schema may hold ``compute_peaks:`` (peak per
GEMM math mode) and ``dequant:`` (weight-only dequantisation): sim/calib/precision.py; and
``interconnect:`` (tensor-parallel all-reduce bandwidth and latency): sim/calib/interconnect.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from sim.calib.composition import Composition, composition_from_dict
from sim.calib.files import available_calibrations, calibration_dirs, calibration_file, shipped_calibrations_dir  # noqa: F401
from sim.calib.interconnect import Interconnect, interconnect_from_dict, interconnect_to_dict
from sim.calib.kernel_models import RIDGE_SHARPNESS, KernelFit, features, kernel_fit_from_dict, roofline_s
from sim.calib.numbers import finite_number, fraction_number, number_in, yaml_float
from sim.calib.precision import PRECISION_KEYS, Precision, precision_from_dict, precision_to_dict
from sim.errors import ConfigError, did_you_mean, read_yaml_file_once

SCHEMA_VERSION = 2
SUPPORTED_SCHEMAS = (1, 2)
KERNEL_TIMINGS = ("engine", "device")


class CalibrationSource(StrEnum):
    DATASHEET = "datasheet"
    MEASURED = "measured"


@dataclass(frozen=True)
class Calibration:
    """One GPU's performance numbers; all rates are per second, sizes in bytes."""

    name: str
    source: CalibrationSource
    gpu_name: str
    memory_bytes: int
    hbm_bandwidth_bytes_per_s: float
    bandwidth_efficiency: float
    peak_flops: float
    compute_eff_max: float
    compute_m_half_tokens: float
    pcie_bandwidth_bytes_per_s: float
    kernel_launch_s: float
    step_overhead_s: float
    provenance: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    schema: int = 1
    #: Fitted kernel models by kernel name (schema 2, measured calibrations); empty otherwise.
    kernels: dict[str, KernelFit] = field(default_factory=dict, hash=False, compare=False)
    #: How kernel times compose into a measured engine step (schema 2; sim/calib/composition.py).
    composition: Composition | None = field(default=None, hash=False, compare=False)
    #: Peaks per math mode and weight-only dequantisation (optional; sim/calib/precision.py).
    precision: Precision | None = field(default=None, hash=False, compare=False)
    #: Engine-profile numbers measured on this machine (``profiles: {vllm-v1: {step_host_s: ...}}``):
    #: applied over the profile's defaults, under a scenario's engine.profile_overrides.
    profiles: dict[str, dict] = field(default_factory=dict, hash=False, compare=False)
    interconnect: Interconnect | None = field(default=None, hash=False, compare=False)  # sim/calib/interconnect.py
    #: What the fitted kernels timed (KERNEL_TIMINGS): ``engine`` (microbench calibrate: kvsim's
    #: validation engine, host work and launches included, used as measured) or ``device`` (GPU
    #: kernel times alone, e.g. imported from NVIDIA's published tables: the engine profile adds its
    #: host time, CUDA graphs and padding around them, as it does around a datasheet roofline).
    kernel_timing: str = "engine"
    #: a GEMM kernel's device time besides its weight reads and math (the datasheet roofline's; sim/cost/datasheet.py)
    gemm_fixed_s: float = 0.0
    file: str = field(default="<calibration>", hash=False, compare=False)

    @property
    def engine_steps_measured(self) -> bool:
        """True where the fitted kernels time kvsim's own engine steps (host work included): the
        cost model uses them as measured, and an engine profile sets only scheduling and the front end."""
        return "gemm" in self.kernels and self.kernel_timing == "engine"

    @property
    def measured_date(self) -> str | None:
        """The date of the measurement (provenance ``date``, first 10 characters), if measured."""
        date = self.provenance.get("date")
        return date[:10] if self.source is CalibrationSource.MEASURED and date else None

    @property
    def source_label(self) -> str:
        """``datasheet``, ``measured YYYY-MM-DD`` or, for imported device timings without a date,
        ``measured kernels (imported)`` (for the run summary)."""
        if self.measured_date:
            return f"measured {self.measured_date}"
        if self.kernel_timing == "device" and self.source is CalibrationSource.MEASURED:
            return "measured kernels (imported)"
        return str(self.source)

    def predict(self, kernel: str, **shape) -> float:
        """Seconds for one launch of ``kernel`` on ``shape`` (fields: sim.calib.kernel_models.KERNELS).

        A fitted kernel model when the calibration has one; otherwise the datasheet roofline
        (effective bandwidth, peak x eff(m), the launch overhead; PCIe for host copies).
        """
        fit = self.kernels.get(kernel)
        if fit is not None:
            return fit.predict(**shape)
        return roofline_s(self.kernel_params(kernel), *features(kernel, shape))

    def kernel_params(self, kernel: str) -> dict[str, float]:
        """The model-form parameters of ``kernel``: fitted, or derived from the datasheet numbers."""
        if kernel in self.kernels:
            return self.kernels[kernel].params
        host = kernel in ("copy_h2d", "copy_d2h", "swap_in", "swap_out")
        return {"bandwidth_bytes_per_s": self.pcie_bandwidth_bytes_per_s if host
                else self.effective_bandwidth_bytes_per_s,
                "flops_per_s": self.peak_flops * self.compute_eff_max, "x_half": self.compute_m_half_tokens,
                "overhead_s": self.step_overhead_s if kernel == "step" else self.kernel_launch_s,
                "item_s": 0.0, "sharpness": RIDGE_SHARPNESS if kernel == "gemm" else math.inf}

    def compute_efficiency(self, m: float) -> float:
        """Achieved fraction of ``peak_flops`` for a GEMM with ``m`` rows (tokens); 0 at m=0."""
        return self.compute_eff_max * m / (m + self.compute_m_half_tokens)

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        return self.hbm_bandwidth_bytes_per_s * self.bandwidth_efficiency


# key -> (kind, constraint). Kinds: "int", "float", "str". Constraints: "positive", "fraction".
_TOP_KEYS: dict[str, tuple[str, str]] = {
    "schema": ("int", "positive"),
    "name": ("str", ""),
    "source": ("str", ""),
    "gpu_name": ("str", ""),
    "memory_bytes": ("int", "positive"),
    "hbm_bandwidth_bytes_per_s": ("float", "positive"),
    "bandwidth_efficiency": ("float", "fraction"),
    "peak_flops": ("float", "positive"),
    "pcie_bandwidth_bytes_per_s": ("float", "positive"),
    "kernel_launch_s": ("float", "non-negative"),
    "step_overhead_s": ("float", "non-negative"),
}
_EFFICIENCY_KEYS: dict[str, tuple[str, str]] = {
    "eff_max": ("float", "fraction"),
    "m_half_tokens": ("float", "non-negative"),
}
#: key -> (floor, ceiling): a calibration outside them is a typo, and would size a KV pool
#: of billions of blocks or time steps as zero or infinite seconds (docs/reference/scenario.md, "Other limits").
CALIBRATION_LIMITS: dict[str, tuple[float, float]] = {
    "schema": (1, 1000),
    "memory_bytes": (1 << 20, 1 << 42),  # 1 MiB to 4 TiB of device memory
    "hbm_bandwidth_bytes_per_s": (1e6, 1e15),  # 1 MB/s to 1 PB/s
    "peak_flops": (1e6, 1e18),  # 1 MFLOP/s to 1 EFLOP/s
    "pcie_bandwidth_bytes_per_s": (1e6, 1e14),
    "kernel_launch_s": (0.0, 1.0),
    "step_overhead_s": (0.0, 10.0),
    "gemm_fixed_s": (0.0, 1e-3),
    "compute_efficiency.m_half_tokens": (0.0, 1e6),
}


def _check(value: Any, kind: str, rule: str, file: str, key: str) -> Any:
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(file, key, f"expected a non-empty string, got {value!r}")
        return value
    value = yaml_float(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        raise ConfigError(file, key, "a number far too large; see the allowed ranges in docs/reference/scenario.md")
    finite_number(value, file, key)
    if kind == "int":
        if not float(value).is_integer():
            raise ConfigError(file, key, f"expected an integer, got {value!r}")
        value = int(value)
    else:
        value = float(value)
    if rule == "positive" and value <= 0:
        raise ConfigError(file, key, f"must be > 0, got {value}")
    if rule == "non-negative" and value < 0:
        raise ConfigError(file, key, f"must be >= 0, got {value}")
    if rule == "fraction":
        fraction_number(value, file, key)
    if key in CALIBRATION_LIMITS:
        number_in(value, file, key, *CALIBRATION_LIMITS[key])
    return value


def _check_keys(data: dict, allowed: dict, required: set[str], file: str, prefix: str) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(file, f"{prefix}{key}", f"unknown key; allowed: {', '.join(allowed)}")
    for key in allowed:
        if key in required and key not in data:
            raise ConfigError(file, f"{prefix}{key}", "required key missing")


def calibration_from_dict(data: Any, *, file: str) -> Calibration:
    """Validate a parsed calibration mapping; errors name ``file`` and the key path."""
    if not isinstance(data, dict):
        raise ConfigError(file, "<root>", "a calibration must be a YAML mapping")
    allowed = {**_TOP_KEYS, "compute_efficiency": None, "provenance": None, **dict.fromkeys(PRECISION_KEYS),
               "profiles": None, "interconnect": None, "gemm_fixed_s": None}
    if data.get("schema") == 2:
        allowed["kernels"] = None
        allowed["composition"] = None
        allowed["kernel_timing"] = None
    optional = {"provenance", "kernels", "composition", *PRECISION_KEYS, "profiles", "interconnect", "kernel_timing",
                "gemm_fixed_s"}
    _check_keys(data, allowed, set(allowed) - optional, file, "")
    v = {k: _check(data[k], kind, rule, file, k) for k, (kind, rule) in _TOP_KEYS.items()}
    if v["schema"] not in SUPPORTED_SCHEMAS:
        raise ConfigError(file, "schema", f"unsupported schema {v['schema']}; this kvsim reads "
                          f"{', '.join(map(str, SUPPORTED_SCHEMAS))}")
    if v["source"] not in set(CalibrationSource):
        raise ConfigError(file, "source", f"got {v['source']!r}; allowed: datasheet, measured")
    eff = data["compute_efficiency"]
    if not isinstance(eff, dict):
        raise ConfigError(file, "compute_efficiency", "expected a mapping with eff_max and m_half_tokens")
    _check_keys(eff, _EFFICIENCY_KEYS, set(_EFFICIENCY_KEYS), file, "compute_efficiency.")
    e = {k: _check(eff[k], kind, rule, file, f"compute_efficiency.{k}")
         for k, (kind, rule) in _EFFICIENCY_KEYS.items()}
    prov = data.get("provenance") or {}
    if not isinstance(prov, dict):
        raise ConfigError(file, "provenance", "expected a mapping of key: text")
    provenance = {str(k): _check(str(val), "str", "", file, f"provenance.{k}") for k, val in prov.items()
                  if not isinstance(val, (dict, list))}
    nested = next((k for k, val in prov.items() if isinstance(val, (dict, list))), None)
    if nested is not None:
        raise ConfigError(file, f"provenance.{nested}", "expected text, got a mapping or a list")
    profiles = data.get("profiles") or {}  # per engine profile: this machine's host numbers
    bad = next((k for k, val in profiles.items() if not isinstance(val, dict)), None) if isinstance(profiles, dict) else ""
    if bad is not None:  # the keys themselves are checked where the profile is built (sim/cost/build.py)
        raise ConfigError(file, f"profiles{'.' + str(bad) if bad else ''}", "expected a mapping of profile name -> {key: value}")
    kernels = data.get("kernels") or {}
    if not isinstance(kernels, dict):
        raise ConfigError(file, "kernels", "expected a mapping of kernel name -> fitted model")
    timing = data.get("kernel_timing", "engine")
    if timing not in KERNEL_TIMINGS:
        raise ConfigError(file, "kernel_timing", f"got {timing!r}"[:200] + f"; allowed: {', '.join(KERNEL_TIMINGS)}")
    if timing == "device" and data.get("composition"):
        raise ConfigError(file, "kernel_timing", "device-timed kernels have no composition (a composition is "
                          "fitted on whole engine steps); drop one of the two")
    return Calibration(
        name=v["name"], source=CalibrationSource(v["source"]), gpu_name=v["gpu_name"],
        memory_bytes=v["memory_bytes"], hbm_bandwidth_bytes_per_s=v["hbm_bandwidth_bytes_per_s"],
        bandwidth_efficiency=v["bandwidth_efficiency"], peak_flops=v["peak_flops"],
        compute_eff_max=e["eff_max"], compute_m_half_tokens=e["m_half_tokens"],
        pcie_bandwidth_bytes_per_s=v["pcie_bandwidth_bytes_per_s"],
        kernel_launch_s=v["kernel_launch_s"], step_overhead_s=v["step_overhead_s"],
        provenance=provenance, schema=v["schema"],
        kernels={str(k): kernel_fit_from_dict(str(k), d, file=file) for k, d in kernels.items()},
        composition=composition_from_dict(data["composition"], file=file) if data.get("composition") else None,
        precision=precision_from_dict(data, file=file, peak_flops=v["peak_flops"]),
        profiles={str(k): dict(val) for k, val in profiles.items()}, file=file,
        interconnect=interconnect_from_dict(data.get("interconnect"), file=file), kernel_timing=timing,
        gemm_fixed_s=_check(data.get("gemm_fixed_s", 0.0), "float", "non-negative", file, "gemm_fixed_s"))


def load_calibration(name_or_path: str, *, source: str = "<cli>", key: str = "gpu") -> Calibration:
    """A calibration by name (``calibrations/<name>.yaml``, see calibration_dirs) or by path.

    Raises ConfigError(source, key, ...) when nothing matches; errors inside the file
    name the file and the key path.
    """
    path = calibration_file(name_or_path)
    if path is None:
        names = ", ".join(available_calibrations()) or f"(none in {' or '.join(map(str, calibration_dirs()))})"
        hint = did_you_mean(name_or_path, available_calibrations())
        raise ConfigError(source, key, f"unknown GPU calibration {name_or_path!r}{hint}; use one of: "
                          f"{names} or a path to a calibration YAML")
    data = read_yaml_file_once(path)  # bounded and safe, parsed once per file version: sim.errors
    return calibration_from_dict(data, file=str(path))


def calibration_to_dict(cal: Calibration) -> dict:
    """The YAML mapping of ``cal`` (inverse of calibration_from_dict; schema 2 when it has kernels)."""
    out = {
        "schema": 2 if cal.kernels else cal.schema, "name": cal.name, "source": str(cal.source),
        "gpu_name": cal.gpu_name, "memory_bytes": int(cal.memory_bytes),
        "hbm_bandwidth_bytes_per_s": float(f"{cal.hbm_bandwidth_bytes_per_s:.6g}"),
        "bandwidth_efficiency": float(cal.bandwidth_efficiency),
        "peak_flops": float(f"{cal.peak_flops:.6g}"),
        "compute_efficiency": {"eff_max": float(cal.compute_eff_max),
                               "m_half_tokens": float(f"{cal.compute_m_half_tokens:.6g}")},
        "pcie_bandwidth_bytes_per_s": float(f"{cal.pcie_bandwidth_bytes_per_s:.6g}"),
        "kernel_launch_s": float(f"{cal.kernel_launch_s:.6g}"),
        "step_overhead_s": float(f"{cal.step_overhead_s:.6g}"),
        "provenance": dict(cal.provenance),
    } | ({"gemm_fixed_s": float(f"{cal.gemm_fixed_s:.6g}")} if cal.gemm_fixed_s else {})
    if cal.kernels:
        if cal.kernel_timing != "engine":
            out["kernel_timing"] = cal.kernel_timing
        out["kernels"] = {name: fit.to_dict() for name, fit in cal.kernels.items()}
    if cal.composition is not None:
        out["composition"] = cal.composition.to_dict()
    if cal.profiles:
        out["profiles"] = {name: dict(values) for name, values in cal.profiles.items()}
    return out | precision_to_dict(cal.precision) | interconnect_to_dict(cal.interconnect)

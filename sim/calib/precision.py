"""Precision-aware compute: a calibration's peak per GEMM math mode and the cost of
weight-only dequantisation, and the rule that picks a run's math mode.

Two optional calibration sections (schema 1 and 2; sim/calib/calibration.py reads them):

    compute_peaks:          # dense tensor-core peak per math mode (no sparsity): FLOP/s, int8 OP/s
      bf16: 9.89e+14        # optional (default peak_flops); a datasheet's must equal peak_flops
      fp16: 9.89e+14        # fp16 inputs, fp32 accumulate
      fp16-acc16: 9.89e+14  # fp16 inputs, fp16 accumulate (GeForce cards: twice fp16)
      fp8: 1.979e+15        # fp8 inputs, fp32 accumulate (what serving fp8 GEMMs use)
      int8: 1.979e+15       # int8 inputs, int32 accumulate
      fp4: 9.0e+15          # fp4 (NVFP4) inputs: Blackwell's tensor cores only
    dequant:                # weight-only GEMMs (W8A16, W4A16, fp8 weight-only): the fraction of the
      int8: 0.85            # bandwidth a bf16 GEMM reads its weights at that they reach (0, 1]
      int4: 0.97
      fp8: 0.85
      fp4: 1.0              # NVFP4 weights on a GPU without fp4 tensor cores (their bytes count the scales)
      source: text          # optional: where the fractions come from
    mode_efficiency:        # optional: the share of the bf16 GEMMs' achieved efficiency a mode's
      fp8: 0.86             # GEMMs reach of their own peak, in (0, 1] (bf16: 1 by definition)
      source: text          # optional: where the fractions come from

A lower-precision mode doubles the tensor cores' multiply-accumulate rate but not the rest of
a GEMM tile's work (loading the operand pipeline, the epilogue that scales and writes the
16-bit output tile), so its GEMMs reach a smaller fraction of their (twice as high) peak
than bf16 GEMMs do of theirs: ``mode_efficiency`` scales the mode's speedup over bf16.

The mode names are the scenario's ``engine.compute_dtype`` choices. Each number is checked
like the other calibration keys (one-line ConfigError: file, key, allowed range). A mode or
dtype a present section lacks is an error only when a run asks for it: the error names
the calibration file, ``compute_peaks.<mode>`` (or ``dequant.<dtype>``) and what it has.

``gemm_precision`` resolves a run's weight dtype and ``engine.compute_dtype`` into what the
cost models charge (sim/cost/datasheet.py documents the rules): the GEMMs run at
``peak_flops x compute_peaks[mode] / compute_peaks.bf16 x mode_efficiency[mode]`` (a measured
calibration's ``peak_flops`` is its fitted throughput; a datasheet's is the bf16 peak, so this is
the mode's peak, scaled by its ``mode_efficiency``). A calibration with none of the three
sections gives the legacy numbers exactly: every mode at ``peak_flops``, activations in the
weight dtype, no dequantisation cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sim.calib.numbers import fraction_number, number_in
from sim.errors import ConfigError
from sim.model.dtypes import DTYPE_BYTES, dtype_name, embedding_dtype

COMPUTE_MODES = ("bf16", "fp16", "fp16-acc16", "fp8", "int8", "fp4")
DEQUANT_DTYPES = ("int8", "int4", "fp8", "fp4")
#: Modes ``mode_efficiency`` may name (bf16 is the reference, 1 by definition).
EFFICIENCY_MODES = tuple(m for m in COMPUTE_MODES if m != "bf16")
#: The calibration sections this module reads (sim/calib/calibration.py allows them).
PRECISION_KEYS = ("compute_peaks", "dequant", "mode_efficiency")
#: Math modes with 16-bit activations: quantised weights are dequantised to them (weight-only).
SIXTEEN_BIT_MODES = ("bf16", "fp16", "fp16-acc16")
PEAK_RANGE = (1e6, 1e18)  # as peak_flops


@dataclass(frozen=True)
class Precision:
    """A calibration's ``compute_peaks`` (with bf16 = peak_flops) and ``dequant`` sections."""

    file: str
    compute_peaks: dict[str, float]
    dequant: dict[str, float] | None = None  # None: no dequant section (weight-only reads cost bytes only)
    dequant_source: str | None = None
    has_compute_peaks: bool = True  # False: the file has only a dequant section
    #: achieved efficiency of a mode's GEMMs relative to bf16's (module docstring); None: all 1
    mode_efficiency: dict[str, float] | None = None
    mode_efficiency_source: str | None = None

    def peak(self, mode: str) -> float:
        """The dense peak of math mode ``mode``; ConfigError naming ``compute_peaks.<mode>`` if absent."""
        if mode not in self.compute_peaks:
            raise ConfigError(self.file, f"compute_peaks.{mode}",
                              f"this calibration has no {mode} peak (engine.compute_dtype asks for it); "
                              f"it has: {', '.join(self.compute_peaks)}")
        return self.compute_peaks[mode]

    def speedup(self, mode: str) -> float:
        """peak(mode) / the bf16 peak x the mode's ``mode_efficiency`` (1 when absent): what the
        cost models scale ``peak_flops`` (or a fitted GEMM's throughput) by; exactly 1.0 for bf16."""
        eff = (self.mode_efficiency or {}).get(mode, 1.0)
        return self.peak(mode) / self.compute_peaks["bf16"] * eff

    def weight_read_efficiency(self, weight_dtype: str) -> float:
        """The fraction of the bandwidth a weight-only GEMM of ``weight_dtype`` reaches (1.0 without a
        dequant section); ConfigError naming ``dequant.<dtype>`` if the section lacks it."""
        if self.dequant is None:
            return 1.0
        if weight_dtype not in self.dequant:
            raise ConfigError(self.file, f"dequant.{weight_dtype}",
                              f"this calibration has no weight-only {weight_dtype} efficiency; it has: "
                              f"{', '.join(self.dequant) or 'none'}")
        return self.dequant[weight_dtype]


@dataclass(frozen=True)
class GemmPrecision:
    """What a run's GEMMs are charged: the math mode, its peak, the weight-read efficiency
    (below 1 for weight-only dequantising kernels) and the bytes of an activation element
    outside the GEMMs (norms, residual adds, RoPE, the MLP activation, MoE permutes)."""

    compute: str
    peak_flops: float
    weight_read_efficiency: float
    act_bytes: float
    weight_only: bool


def gemm_precision(cal: Any, weight_dtype: str | None, weight_dtype_bytes: float,
                   compute_dtype: str | None) -> GemmPrecision:
    """Resolve ``compute_dtype`` (None: follow the weights) on calibration ``cal``.

    Without ``cal.precision``: the legacy charge (``peak_flops`` for every mode, activations
    in the weight dtype, no dequantisation). With it: None follows the weights (bf16, fp16
    -> fp16 if the calibration has that peak, else bf16; fp32 -> bf16; fp8 (fp4) -> fp8 (fp4)
    where the GPU has it, else weight-only on bf16 as vLLM's fp8 (fp4) Marlin does; int8/int4 ->
    bf16, weight-only); int8, int4, fp8 or fp4 weights under a 16-bit mode are weight-only and read at
    ``dequant.<dtype>`` of the bandwidth; activations outside the GEMMs stay 16-bit (4
    bytes for fp32 weights)."""
    p = getattr(cal, "precision", None)
    if p is None:
        return GemmPrecision(compute_dtype or "bf16", cal.peak_flops, 1.0, weight_dtype_bytes, False)
    weights = weight_dtype or dtype_name(weight_dtype_bytes)
    mode = compute_dtype
    if mode is None:
        if weights == "fp16" and "fp16" in p.compute_peaks:
            mode = "fp16"
        elif weights in ("fp8", "fp4") and weights in p.compute_peaks:
            mode = weights
        else:
            mode = "bf16"
    weight_only = weights in DEQUANT_DTYPES and mode in SIXTEEN_BIT_MODES
    efficiency = p.weight_read_efficiency(weights) if weight_only else 1.0
    peak = cal.peak_flops * p.speedup(mode)  # = compute_peaks[mode] on a datasheet (bf16 = peak_flops)
    return GemmPrecision(mode, peak, efficiency, max(2.0, weight_dtype_bytes), weight_only)


def embedding_precision(cal: Any, weight_dtype: str | None, weight_dtype_bytes: float, compute_dtype: str | None,
                        embedding: str | None = None) -> tuple[float, GemmPrecision]:
    """(bytes per lm_head weight, the lm_head GEMM's GemmPrecision): the vocabulary matrices' dtype
    by ``sim.model.dtypes.embedding_dtype`` (``embedding``, else bf16 under quantized weights). The
    layers' precision when it is the weights' dtype; else its own, following its weights (a bf16
    lm_head runs a bf16 GEMM beside fp8 layers)."""
    weights = weight_dtype or dtype_name(weight_dtype_bytes)
    head = embedding_dtype(weights, embedding)
    if head == weights:
        return weight_dtype_bytes, gemm_precision(cal, weight_dtype, weight_dtype_bytes, compute_dtype)
    return DTYPE_BYTES[head], gemm_precision(cal, head, DTYPE_BYTES[head], None)


def _number(value: Any, file: str, key: str, *, fraction: bool = False) -> float:
    """A finite number: a fraction in (0, 1], or a peak within PEAK_RANGE."""
    return fraction_number(value, file, key) if fraction else number_in(value, file, key, *PEAK_RANGE)


def _mapping(data: Any, file: str, key: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(data, dict) or not data:
        raise ConfigError(file, key, f"expected a non-empty mapping with keys from: {', '.join(allowed)}")
    for k in data:
        if k not in allowed:
            raise ConfigError(file, f"{key}.{k}", f"unknown key; allowed: {', '.join(allowed)}")
    return data


def precision_from_dict(data: dict, *, file: str, peak_flops: float) -> Precision | None:
    """The ``compute_peaks`` and ``dequant`` sections of a parsed calibration (None: neither).

    A datasheet's ``compute_peaks.bf16`` must equal ``peak_flops``; a measured calibration's
    ``peak_flops`` is its fitted GEMM throughput, so its bf16 entry (the datasheet peak) may
    differ: the cost models use the ratios of the peaks to bf16."""
    if not any(key in data for key in PRECISION_KEYS):
        return None
    peaks = {"bf16": peak_flops}
    if "compute_peaks" in data:
        raw = _mapping(data["compute_peaks"], file, "compute_peaks", COMPUTE_MODES)
        for mode in COMPUTE_MODES:
            if mode in raw:
                peaks[mode] = _number(raw[mode], file, f"compute_peaks.{mode}")
        if data.get("source") == "datasheet" and not math.isclose(peaks["bf16"], peak_flops, rel_tol=1e-9):
            raise ConfigError(file, "compute_peaks.bf16", f"must equal peak_flops ({peak_flops:g}: the bf16 "
                              f"peak), got {peaks['bf16']:g}; leave it out or make them agree")
    dequant, source = None, None
    if "dequant" in data:
        raw = _mapping(data["dequant"], file, "dequant", (*DEQUANT_DTYPES, "source"))
        dequant = {d: _number(raw[d], file, f"dequant.{d}", fraction=True)
                   for d in DEQUANT_DTYPES if d in raw}
        if "source" in raw:
            source = raw["source"]
            if not isinstance(source, str) or not source.strip():
                raise ConfigError(file, "dequant.source", f"expected a non-empty string, got {source!r}")
    mode_eff, mode_source = None, None
    if "mode_efficiency" in data:
        raw = _mapping(data["mode_efficiency"], file, "mode_efficiency", (*EFFICIENCY_MODES, "source"))
        mode_eff = {m: _number(raw[m], file, f"mode_efficiency.{m}", fraction=True)
                    for m in EFFICIENCY_MODES if m in raw}
        mode_source = _source(raw, file, "mode_efficiency.source")
    return Precision(file=file, compute_peaks=peaks, dequant=dequant, dequant_source=source,
                     has_compute_peaks="compute_peaks" in data, mode_efficiency=mode_eff,
                     mode_efficiency_source=mode_source)


def _source(raw: dict, file: str, key: str) -> str | None:
    """An optional non-empty ``source`` text of a section."""
    source = raw.get("source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise ConfigError(file, key, f"expected a non-empty string, got {source!r}")
    return source


def precision_to_dict(p: Precision | None) -> dict:
    """The YAML sections of ``p`` (inverse of precision_from_dict; empty for None)."""
    if p is None:
        return {}
    out: dict = {}
    if p.has_compute_peaks:
        out["compute_peaks"] = {mode: float(f"{v:.6g}") for mode, v in p.compute_peaks.items()}
    if p.dequant is not None:
        out["dequant"] = {d: float(v) for d, v in p.dequant.items()}
        if p.dequant_source:
            out["dequant"]["source"] = p.dequant_source
    if p.mode_efficiency is not None:
        out["mode_efficiency"] = {m: float(v) for m, v in p.mode_efficiency.items()}
        if p.mode_efficiency_source:
            out["mode_efficiency"]["source"] = p.mode_efficiency_source
    return out


__all__ = ["COMPUTE_MODES", "DEQUANT_DTYPES", "EFFICIENCY_MODES", "PRECISION_KEYS", "GemmPrecision", "Precision", "gemm_precision",
           "embedding_precision",
           "precision_from_dict", "precision_to_dict"]

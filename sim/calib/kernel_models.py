"""Fitted kernel time models: a kernel's shape in, seconds out. Pure: no I/O, no numpy.

Every kernel ``microbench`` measures is described by one :class:`KernelSpec`: its shape
fields and how a shape turns into the physical quantities of the model form, bytes moved,
FLOPs, sequential work items (per-sequence loops of a reference path) and the dimension
that fills the compute units (GEMM rows = tokens). One model form serves all kernels:

    time_s = overhead_s + item_s x items
             + smax(bytes / bandwidth_bytes_per_s, flops / (flops_per_s x x / (x + x_half)))

``smax(a, b) = (a^p + b^p)^(1/p)`` with ``p = sharpness`` is a smooth max: p -> inf is the
roofline's hard max; a finite p says memory and compute overlap imperfectly near the ridge.
The efficiency ``x / (x + x_half)`` is how far the token dimension fills the tensor cores
(a GEMM over 4 tokens pads its tiles to 16 or 64 rows). Kernels without FLOPs: bandwidth plus overhead.

Optional terms, on when their parameters are present (older calibrations predict as before): the
GEMM's tiles/waves (``sm_count``), regimes (``mid_max_m``), split-k (``split_k_len``; sim/calib/gemm_tiles.py),
L2 residency (``l2_resident_bytes``; sim/calib/gemm_memory.py); decode's
split-KV (``full_ctas``), prefill's head dim (``head_dim_half``), GQA (``kv_reuse_len``; sim/calib/attention_terms.py).

A :class:`KernelFit` holds the fitted parameters, its cross-validated error and, optionally,
a measured grid: where a query's shape matches a measured one on every field but the kernel's
``axis`` (GEMM: ``m``) inside the measured range, the prediction interpolates the measurements
(log-log); elsewhere it is the analytic form. Fits: ``microbench.fit``; stored in a
calibration's ``kernels:`` section (sim/calib/calibration.py).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Callable

from sim.calib.attention_terms import (
    attention_param_names, attention_params_from_dict, decode_shape_s, prefill_efficiency, prefill_on,
    prefill_shape_gqa, smooth_max, split_on)
from sim.calib.gemm_memory import memory_bytes
from sim.calib.gemm_tiles import (executed_flops, gemm_param_names, previous_regime_end,
                                  regime_and_split_params_from_dict, tile_params_from_dict, tiles_on)
from sim.calib.numbers import number_in
from sim.errors import ConfigError
from sim.model.dtypes import DTYPE_BYTES

PARAM_NAMES = ("bandwidth_bytes_per_s", "flops_per_s", "x_half", "overhead_s", "item_s", "sharpness")
#: The sharpness of a datasheet GEMM (sim/cost/datasheet.py): how far its weight reads and its math
#: overlap near the ridge (there 2^(1/p) = 1.6x the larger). Fitted with this form on 36,516 real A100
#: linear-layer timings (benchmarks/microbench_a100_gemm.py, Vidur's data): p = 1.5 on Llama-3-8B's
#: shapes (x_half 8.0; seven models held out at 6.7% MAPE), 1.5 with phi-2, 1.41 on all eight.
RIDGE_SHARPNESS = 1.5
Shape = dict


def _b(s: Shape) -> int: return DTYPE_BYTES[s.get("dtype", "bf16")]  # noqa: E704


def _pairs(s: Shape) -> float:
    """Causal (query, key) pairs of ``num_seqs`` chunks of ``query_len`` after ``context_len``."""
    q = s["query_len"]
    return s["num_seqs"] * q * (s["context_len"] + (q + 1) / 2)


@dataclass(frozen=True)
class KernelSpec:
    """How one kernel's shape maps onto the model form. ``axis``: the grid-interpolation field."""
    fields: tuple[str, ...]
    bytes: Callable[[Shape], float]
    flops: Callable[[Shape], float] = lambda s: 0.0
    items: Callable[[Shape], float] = lambda s: 0.0
    x: Callable[[Shape], float] = lambda s: 1.0
    axis: str = ""
    doc: str = ""
    tiled: bool = False  # (m, n, k) fields: may carry the tile/wave term (sim/calib/gemm_tiles.py)


KERNELS: dict[str, KernelSpec] = {
    "gemm": KernelSpec(
        ("m", "n", "k", "dtype"), axis="m", doc="y[m, n] = x[m, k] @ W[k, n] (torch.matmul / cuBLAS)",
        bytes=lambda s: (s["m"] * s["k"] + s["k"] * s["n"] + s["m"] * s["n"]) * _b(s),
        flops=lambda s: 2.0 * s["m"] * s["n"] * s["k"], x=lambda s: s["m"], tiled=True),
    "decode_gemv": KernelSpec(
        ("m", "n", "k", "dtype"), axis="m", doc="kernels.decode_gemv, skinny m (CUDA only)",
        bytes=lambda s: (s["m"] * s["k"] + s["k"] * s["n"] + s["m"] * s["n"]) * _b(s),
        flops=lambda s: 2.0 * s["m"] * s["n"] * s["k"], x=lambda s: s["m"]),
    "decode_attention": KernelSpec(
        ("num_seqs", "context_len", "num_q_heads", "num_kv_heads", "head_dim", "block_size", "dtype"),
        axis="context_len", doc="paged attention of one new token per sequence over context_len KV tokens",
        bytes=lambda s: s["num_seqs"] * (s["context_len"] * 2 * s["num_kv_heads"] + 2 * s["num_q_heads"])
        * s["head_dim"] * _b(s),
        flops=lambda s: 4.0 * s["num_seqs"] * s["context_len"] * s["num_q_heads"] * s["head_dim"],
        items=lambda s: s["num_seqs"]),
    "prefill_attention": KernelSpec(
        ("num_seqs", "query_len", "context_len", "num_q_heads", "num_kv_heads", "head_dim", "dtype"),
        axis="query_len", doc="causal attention of query_len new tokens per sequence after context_len cached",
        bytes=lambda s: s["num_seqs"] * ((s["context_len"] + s["query_len"]) * 2 * s["num_kv_heads"]
                                         + 2 * s["query_len"] * s["num_q_heads"]) * s["head_dim"] * _b(s),
        flops=lambda s: 4.0 * s["num_q_heads"] * s["head_dim"] * _pairs(s),
        items=lambda s: s["num_seqs"], x=lambda s: s["query_len"]),
    "kv_write": KernelSpec(
        ("num_tokens", "num_kv_heads", "head_dim", "dtype"), axis="num_tokens",
        doc="write K and V of num_tokens into the paged cache through slot_mapping",
        bytes=lambda s: 4.0 * s["num_tokens"] * s["num_kv_heads"] * s["head_dim"] * _b(s)),
    "rmsnorm": KernelSpec(
        ("num_tokens", "hidden_size", "dtype"), axis="num_tokens",
        doc="residual add (in place) then RMSNorm: read 3, write 2 hidden vectors per token",
        bytes=lambda s: 5.0 * s["num_tokens"] * s["hidden_size"] * _b(s)),
    "elementwise": KernelSpec(
        ("num_tokens", "num_q_heads", "num_kv_heads", "head_dim", "intermediate_size", "hidden_size", "dtype"),
        axis="num_tokens",
        doc="one layer's remaining elementwise work: RoPE on q and k, SiLU(gate) * up, two residual adds",
        bytes=lambda s: s["num_tokens"] * _b(s) * (
            3.0 * (s["num_q_heads"] + s["num_kv_heads"]) * s["head_dim"]  # RoPE: read, fp32 math, write
            + 3.0 * s["intermediate_size"] + 6.0 * s["hidden_size"])),  # activation; adds
    "copy_d2d": KernelSpec(("num_bytes",), axis="num_bytes", doc="device-to-device copy",
                           bytes=lambda s: 2.0 * s["num_bytes"]),
    **{kernel: KernelSpec(fields, axis="num_bytes", doc=doc, bytes=lambda s: float(s["num_bytes"])) for kernel, fields, doc in (
        ("copy_h2d", ("num_bytes", "pinned"), "host-to-device copy (one contiguous buffer)"),
        ("copy_d2h", ("num_bytes", "pinned"), "device-to-host copy (one contiguous buffer)"),
        ("swap_in", ("num_bytes", "block_bytes", "pinned"), "a host buffer into scattered cache blocks (a CPU tier's load)"),
        ("swap_out", ("num_bytes", "block_bytes", "pinned"), "scattered cache blocks into a host buffer (a tier's store)"))},
    "step": KernelSpec(
        ("num_seqs", "vocab_size"), axis="num_seqs",
        doc="per-step host work: packing the batch's metadata (the validation engine's pack_batch), "
            "greedy sampling over the logits, ids download, sync",
        bytes=lambda s: 4.0 * s["num_seqs"] * s["vocab_size"], items=lambda s: s["num_seqs"]),
}


def features(kernel: str, shape: Shape) -> tuple[float, float, float, float]:
    """(bytes, flops, items, x) of ``shape``; KeyError names a missing field."""
    spec = KERNELS[kernel]
    return spec.bytes(shape), spec.flops(shape), spec.items(shape), spec.x(shape)


def roofline_s(params: dict[str, float], nbytes: float, flops: float, items: float, x: float) -> float:
    """The model form (module docstring) for one kernel launch."""
    mem_s = nbytes / params["bandwidth_bytes_per_s"]
    comp_s = 0.0
    if flops > 0:
        eff = 1.0 if math.isinf(x) else x / (x + params["x_half"]) if x > 0 else 0.0
        comp_s = flops / (params["flops_per_s"] * eff) if eff > 0 else math.inf
    hi, lo = (mem_s, comp_s) if mem_s >= comp_s else (comp_s, mem_s)
    return params["overhead_s"] + params["item_s"] * items + smooth_max(hi, lo, params["sharpness"])


def analytic_s(params: dict[str, float], kernel: str, shape: Shape) -> float:
    """The model form for one launch of ``kernel`` on ``shape``, with the tile/wave term if on.

    With kernel regimes a GEMM never takes less than at the previous regime's last token
    count (a faster kernel past a bound does not make more tokens cheaper)."""
    if kernel == "decode_attention" and split_on(params):
        return decode_shape_s(params, shape)
    nbytes, flops, items, x = features(kernel, shape)
    if kernel == "prefill_attention" and prefill_on(params):
        flops /= prefill_efficiency(params, shape["num_seqs"], shape["query_len"], shape["num_q_heads"],
                                    shape["head_dim"], shape["num_kv_heads"])
        extra, cta_s = prefill_shape_gqa(params, shape)
        return roofline_s(params, nbytes + extra, flops, items, x) + cta_s
    if KERNELS[kernel].tiled:  # the L2-residency term, when on (sim/calib/gemm_memory.py)
        nbytes = memory_bytes(params, nbytes)
    if flops > 0 and KERNELS[kernel].tiled and tiles_on(params) and shape["m"] > 0 and shape["k"] > 0:
        flops = executed_flops(params, shape["m"], shape["n"], shape["k"])
        end = previous_regime_end(params, shape["m"])
        if end > 0:
            return max(roofline_s(params, nbytes, flops, items, x), analytic_s(params, kernel, {**shape, "m": end}))
    return roofline_s(params, nbytes, flops, items, x)


def grid_key(kernel: str, shape: Shape) -> tuple:
    """The shape's fields other than the kernel's axis, in field order (the grid's row key)."""
    spec = KERNELS[kernel]
    return tuple(shape.get(f, "bf16" if f == "dtype" else None) for f in spec.fields if f != spec.axis)


@dataclass(frozen=True)
class GridRow:
    """Measurements of one shape along the kernel's axis: ascending ``axis_values``, their times
    (non-decreasing: microbench.fit stores the running maximum, the simulator's contract)."""

    key: tuple
    axis_values: tuple[float, ...]
    times_s: tuple[float, ...]

    def interpolate(self, v: float) -> float | None:
        """Log-log interpolation inside [first, last]; None outside."""
        xs = self.axis_values
        if v < xs[0] or v > xs[-1] or v <= 0:
            return None
        i = bisect.bisect_left(xs, v)
        if xs[i] == v:
            return self.times_s[i]
        x0, x1, t0, t1 = xs[i - 1], xs[i], self.times_s[i - 1], self.times_s[i]
        w = math.log(v / x0) / math.log(x1 / x0)
        return math.exp(math.log(t0) + w * math.log(t1 / t0))


@dataclass(frozen=True)
class KernelFit:
    """One kernel's fitted model. ``cv_mape``: k-fold-by-shape cross-validated mean |error| / time."""

    kernel: str
    params: dict[str, float]
    cv_mape: float | None = None
    train_mape: float | None = None
    num_records: int = 0
    num_shapes: int = 0
    cv_folds: int = 0
    grid: tuple[GridRow, ...] = ()
    _rows: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._rows.update({row.key: row for row in self.grid})

    def analytic_s(self, **shape) -> float:
        return analytic_s(self.params, self.kernel, shape)

    def predict(self, **shape) -> float:
        """Seconds for one launch on ``shape``: the measured grid where it covers, else analytic.

        Past either end of a measured row the analytic form is anchored to the row's end
        (scaled by analytic(v) / analytic(end)), so predictions stay continuous and, since
        grids are stored non-decreasing, non-decreasing along the axis.
        """
        row = self._rows.get(grid_key(self.kernel, shape))
        if row is None:
            return self.analytic_s(**shape)
        axis = KERNELS[self.kernel].axis
        v = shape[axis]
        t = row.interpolate(v)
        if t is not None:
            return t
        end = 0 if v < row.axis_values[0] else -1
        anchor = self.analytic_s(**{**shape, axis: row.axis_values[end]})
        return row.times_s[end] * self.analytic_s(**shape) / anchor

    def to_dict(self) -> dict:
        spec = KERNELS[self.kernel]
        key_fields = [f for f in spec.fields if f != spec.axis]
        names = PARAM_NAMES + gemm_param_names(self.params) + attention_param_names(self.params)
        out = {"params": {k: _num(self.params[k]) for k in names},
               "cv_mape": _num(self.cv_mape), "train_mape": _num(self.train_mape),
               "cv_folds": self.cv_folds, "num_records": self.num_records, "num_shapes": self.num_shapes}
        out["grid"] = [{**dict(zip(key_fields, row.key)), spec.axis: list(row.axis_values),
                        "time_s": [_num(t) for t in row.times_s]} for row in self.grid]
        return out


def _num(v: float | None) -> float | None: return None if v is None else float(f"{v:.6g}")  # noqa: E704


def kernel_fit_from_dict(kernel: str, data, *, file: str) -> KernelFit:
    """Validate one ``kernels.<kernel>`` mapping; ConfigError names the file and key path."""
    where = f"kernels.{kernel}"
    if kernel not in KERNELS:
        raise ConfigError(file, where, f"unknown kernel; allowed: {', '.join(KERNELS)}")
    if not isinstance(data, dict) or not isinstance(data.get("params"), dict):
        raise ConfigError(file, f"{where}.params", "expected a mapping of the model's parameters")
    params = {}
    for name in PARAM_NAMES:
        v = data["params"].get(name)
        if isinstance(v, str):
            try:
                v = math.inf if v.lower() in (".inf", "inf") else float(v)
            except ValueError:
                pass  # reported below
        lo, hi = PARAM_LIMITS[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
            raise ConfigError(file, f"{where}.params.{name}", f"expected a number >= 0, got {v!r}")
        if not (lo <= v <= hi or (name in _MAY_BE_INF and v == math.inf)):
            raise ConfigError(file, f"{where}.params.{name}", f"{v!r} is outside the allowed range "
                              f"{lo:g} to {hi:g}" + (" (or .inf)" if name in _MAY_BE_INF else ""))
        params[name] = float(v)
    spec = KERNELS[kernel]
    tiles = tile_params_from_dict(data["params"], file, f"{where}.params")
    if tiles and not spec.tiled:
        raise ConfigError(file, f"{where}.params.sm_count", "the tile/wave term is for GEMMs (kernel gemm) only")
    params.update(tiles)
    params.update(regime_and_split_params_from_dict(data["params"], file, f"{where}.params"))
    params.update(attention_params_from_dict(kernel, data["params"], file, f"{where}.params"))
    grid = data.get("grid") or []
    if not isinstance(grid, list):
        raise ConfigError(file, f"{where}.grid", "expected a list of rows")
    rows = [_grid_row(kernel, row, file, f"{where}.grid[{i}]") for i, row in enumerate(grid)]
    extras = {k: _stat(data.get(k), file, f"{where}.{k}", k.endswith("mape"))
              for k in ("cv_mape", "train_mape", "num_records", "num_shapes", "cv_folds")}
    return KernelFit(kernel, params, cv_mape=extras["cv_mape"], train_mape=extras["train_mape"],
                     num_records=int(extras["num_records"] or 0), num_shapes=int(extras["num_shapes"] or 0),
                     cv_folds=int(extras["cv_folds"] or 0), grid=tuple(rows))


#: name -> (floor, ceiling); flops_per_s may be .inf (no compute), sharpness .inf (a hard max)
_MAY_BE_INF = ("flops_per_s", "sharpness")
PARAM_LIMITS = {"bandwidth_bytes_per_s": (1.0, 1e18), "flops_per_s": (1.0, 1e21), "x_half": (0.0, 1e9),
                "overhead_s": (0.0, 10.0), "item_s": (0.0, 10.0), "sharpness": (1e-3, 1e3)}


def _grid_row(kernel: str, row, file: str, where: str) -> GridRow:
    spec = KERNELS[kernel]
    try:
        xs, ts = [float(v) for v in row[spec.axis]], [float(v) for v in row["time_s"]]
        key = grid_key(kernel, row)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError):
        raise ConfigError(file, where, f"bad grid row; expected a mapping with the fields "
                          f"{', '.join(spec.fields)} and time_s (lists of numbers)") from None
    if any(v is not None and not isinstance(v, (str, int, float)) for v in key):
        raise ConfigError(file, where, "a shape field holds a list or mapping; expected a number or text")
    if not all(math.isfinite(v) for v in xs + ts) or max(ts, default=0) > 1e6:
        raise ConfigError(file, where, "axis values and time_s must be finite (time_s at most 1e6 s)")
    if len(xs) != len(ts) or len(xs) < 2 or any(b <= a for a, b in zip(xs, xs[1:])) or xs[0] <= 0 or min(ts) <= 0 or ts != sorted(ts):  # noqa: E501 (log-log: no axis 0 or repeat)
        raise ConfigError(file, where, "need >= 2 strictly ascending axis values (> 0) and as many "
                          "non-decreasing time_s (> 0)")
    return GridRow(key, tuple(xs), tuple(ts))


def _stat(v, file: str, key: str, fraction: bool):
    """An optional fit statistic: a finite number >= 0 (a count, or an error share)."""
    if v is None:
        return None
    v = number_in(v, file, key, 0.0, 1e12)
    return v if fraction else int(v)

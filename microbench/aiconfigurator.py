"""``microbench import aiconfigurator``: NVIDIA's published kernel timings as kvsim measurements.

The ``aiconfigurator-core`` package (Apache-2.0; ``pip install -e '.[import]'``) ships timings
NVIDIA collected of real serving-engine kernels on real GPUs, as parquet tables under
``aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/``. This module turns the
ones kvsim has a kernel model for into its measurement records (microbench/records.py) and
fits them with the same fit as a local measurement (microbench/fit.py):

=====================================  ====================  ==========================================
table (columns)                        kvsim kernel          mapping
=====================================  ====================  ==========================================
gemm_perf (m, n, k, gemm_dtype)        ``gemm``              bfloat16 rows of the backend's default
                                                             linear kernel: m, n, k, dtype bf16
                                       ``gemm_peak``         bfloat16 and fp8 (per-tensor) rows with
                                                             m, n, k >= 4096: the achieved peak per
                                                             math mode (``compute_peaks``)
context_attention_perf (batch_size,    ``prefill_attention`` num_seqs = batch_size, query_len = isl,
isl, num_heads, num_key_value_heads,                         context_len 0, dtype = kv_cache_dtype
head_dim, kv_cache_dtype)
generation_attention_perf (... step)   ``decode_attention``  num_seqs = batch_size, context_len =
                                                             isl + step (the KV length),
                                                             block_size 16 (vLLM's default)
=====================================  ====================  ==========================================

Only full attention (``window_size`` 0), beam width 1 and bf16 KV are kept: kvsim has one
attention form for every KV dtype (its bytes scaled by the dtype), and the tables show fp8 KV
is not twice as fast (on H100 SXM under vLLM 0.24 the bf16-fitted form is 10% fast on fp8 rows
and 7% slow on bf16 ones when fitted on both), so the form is fitted on the default dtype. Where a table holds several
kernels for one dtype (FA3 and FA4, say) the one with the most rows is taken: the backend's
default lane. Latencies are milliseconds (checked: a 1 x 4096 x 4096 bf16 GEMM on H100 SXM reads
its 32 MiB of weights in 0.015 ms, 2.2 TB/s); records hold seconds.

What the tables lack, the datasheet calibration of the same GPU fills in and the calibration's
provenance says so per kernel: the KV write, RMSNorm, the elementwise work, device and host
copies (PCIe swaps), the engine's host time and the interconnect. The kernels are GPU times
alone (``kernel_timing: device``): the engine profile adds its host time, CUDA graphs and
padding around them (sim/cost/build.py), as it does around a datasheet roofline.

The table reader needs pandas and pyarrow (the ``[import]`` extra); the conversion itself
(``convert``) takes plain row dicts, so it is tested without them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sim.errors import ConfigError

PACKAGE = "aiconfigurator-core"


@dataclass(frozen=True)
class System:
    """An aiconfigurator system and the kvsim datasheet calibration of the same GPU."""

    datasheet: str  # kvsim calibration name: memory, PCIe, host numbers, interconnect
    sm_count: int  # NVIDIA's datasheet / whitepaper SM count: the GEMM's tile/wave term


#: aiconfigurator system -> kvsim GPU. SM counts: NVIDIA's architecture whitepapers (A100 108,
#: H100 / H200 SXM5 132, L40S 142, B200 148).
SYSTEMS: dict[str, System] = {
    "h100_sxm": System("h100-sxm", 132),
    "h200_sxm": System("h200", 132),
    "b200_sxm": System("b200", 148),
    "a100_sxm": System("a100-80gb", 108),
    "l40s": System("l40s", 142),
}
BACKENDS = ("vllm", "sglang", "trtllm")
#: table file -> (op folder, kvsim kernel)
TABLES = {"gemm_perf.parquet": ("gemm", "gemm"),
          "context_attention_perf.parquet": ("attention", "prefill_attention"),
          "generation_attention_perf.parquet": ("attention", "decode_attention")}
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "fp8": "fp8"}
PEAK_MIN_DIM = 4096  # gemm_peak records: m, n and k at least this (large GEMMs: the achieved peak)
DECODE_BLOCK_SIZE = 16
#: what the tables lack: taken from the datasheet calibration
DATASHEET_KERNELS = ("kv_write", "rmsnorm", "elementwise", "copy_d2d", "copy_h2d", "copy_d2h", "step")


def calibration_name(system: str, backend: str) -> str:
    """``h100-sxm@vllm``: the kvsim GPU name, then the backend whose kernels were timed."""
    return f"{SYSTEMS[system].datasheet}@{backend}"


def _version_key(text: str) -> tuple:
    """Sort key of a version folder name: numbers as numbers (0.5.14 > 0.5.6.post2 > 0.5.6)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-]|(?<=\d)(?=[a-z])", text))


def data_root() -> Path:
    """The installed package's ``systems/data`` folder (ConfigError naming the extra when missing)."""
    try:
        import aiconfigurator_core  # noqa: PLC0415  (optional: the [import] extra)
    except ImportError:
        raise ConfigError("<cli>", "import aiconfigurator", f"{PACKAGE} is not installed; pip install -e "
                          "'.[import]' (aiconfigurator-core, pandas, pyarrow)") from None
    root = Path(aiconfigurator_core.__file__).resolve().parent / "systems" / "data"
    if not root.is_dir():
        raise ConfigError("<cli>", "import aiconfigurator", f"{PACKAGE} has no systems/data folder at {root}")
    return root


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def table_versions(root: Path, system: str, backend: str) -> dict[str, list[str]]:
    """Table file -> the framework versions holding it, oldest first."""
    out = {}
    for table, (op, _) in TABLES.items():
        base = root / system / op / backend
        found = [d.name for d in base.iterdir() if (d / table).is_file()] if base.is_dir() else []
        out[table] = sorted(found, key=_version_key)
    return out


def choose_versions(root: Path, system: str, backend: str, version: str | None) -> dict[str, str]:
    """Table file -> framework version: ``version`` where given (every table must have it), else
    the newest version holding all three tables, else each table's newest."""
    if system not in SYSTEMS:
        raise ConfigError("<cli>", "--system", f"got {system!r}; allowed: {', '.join(SYSTEMS)}")
    if backend not in BACKENDS:
        raise ConfigError("<cli>", "--backend", f"got {backend!r}; allowed: {', '.join(BACKENDS)}")
    found = table_versions(root, system, backend)
    missing = [t for t, v in found.items() if not v]
    if missing:
        raise ConfigError("<cli>", "--backend", f"{PACKAGE} {package_version()} has no {', '.join(missing)} "
                          f"for {system} under {backend}")
    if version is not None:
        lacking = [t for t, v in found.items() if version not in v]
        if lacking:
            have = sorted(set().union(*found.values()), key=_version_key)
            raise ConfigError("<cli>", "--version", f"{backend} {version} on {system} lacks {', '.join(lacking)}; "
                              f"versions there: {', '.join(have)}")
        return dict.fromkeys(found, version)
    common = set.intersection(*(set(v) for v in found.values()))
    if common:
        return dict.fromkeys(found, max(common, key=_version_key))
    return {t: v[-1] for t, v in found.items()}


def _pick_sources(rows: list[dict], dtype_col: str) -> dict[str, str]:
    """Per dtype, the kernel source with the most rows (the backend's default lane)."""
    counts = Counter((r[dtype_col], r["kernel_source"]) for r in rows)
    best: dict[str, tuple[int, str]] = {}
    for (dtype, source), n in counts.items():
        if dtype not in best or (n, source) > best[dtype]:
            best[dtype] = (n, source)
    return {dtype: source for dtype, (_, source) in best.items()}


def _seconds(latency_ms) -> float | None:
    try:
        t = float(latency_ms) / 1e3
    except (TypeError, ValueError):
        return None
    return t if math.isfinite(t) and 0 < t < 1e6 else None


@dataclass
class Converted:
    """Records of one table, the kernel sources they came from and what was left out (counts)."""

    records: list[dict]
    sources: dict[str, str]  # kvsim dtype -> kernel source
    rows: int
    skipped: Counter = dataclasses.field(default_factory=Counter)


def convert(table: str, rows: list[dict]) -> Converted:
    """One table's rows (dicts of its columns) as kvsim measurement records (module docstring)."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table}")
    kernel = TABLES[table][1]
    skipped: Counter = Counter()
    dtype_col = "gemm_dtype" if kernel == "gemm" else "kv_cache_dtype"
    sources = _pick_sources(rows, dtype_col)
    records = []
    for r in rows:
        dtype = DTYPES.get(r[dtype_col])
        if dtype is None:
            skipped[f"{dtype_col} {r[dtype_col]}"] += 1
            continue
        if r["kernel_source"] != sources[r[dtype_col]]:
            skipped[f"kernel {r['kernel_source']} ({r[dtype_col]})"] += 1
            continue
        t = _seconds(r["latency"])
        if t is None:
            skipped["latency not a positive number"] += 1
            continue
        base = {"time_s": t, "source": "aiconfigurator", "impl": r["kernel_source"]}
        if kernel == "gemm":
            m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
            if min(m, n, k) <= 0:
                skipped["a zero dimension"] += 1
                continue
            if dtype in ("bf16", "fp8") and min(m, n, k) >= PEAK_MIN_DIM:
                records.append({"kernel": "gemm_peak", "m": m, "n": n, "k": k, "mode": dtype, **base})
            if dtype == "bf16":
                records.append({"kernel": "gemm", "m": m, "n": n, "k": k, "dtype": dtype, **base})
            continue
        if dtype != "bf16":  # one attention form serves every KV dtype, its bytes scaled: fitted on bf16 KV
            skipped[f"{dtype_col} {r[dtype_col]} (the fit is on bf16 KV)"] += 1
            continue
        if int(r.get("window_size", 0) or 0) != 0 or int(r.get("beam_width", 1) or 1) != 1:
            skipped["sliding window or beam search"] += 1
            continue
        shape = {"num_seqs": int(r["batch_size"]), "num_q_heads": int(r["num_heads"]),
                 "num_kv_heads": int(r["num_key_value_heads"]), "head_dim": int(r["head_dim"]), "dtype": dtype}
        if kernel == "prefill_attention":
            if int(r.get("step", 0) or 0) != 0:
                skipped["context attention after a cached prefix"] += 1
                continue
            shape |= {"query_len": int(r["isl"]), "context_len": 0}
        else:
            shape |= {"context_len": int(r["isl"]) + int(r["step"]), "block_size": DECODE_BLOCK_SIZE}
        if min(v for k, v in shape.items() if k not in ("dtype", "context_len")) <= 0 or shape["context_len"] < 0:
            skipped["a zero dimension"] += 1
            continue
        records.append({"kernel": kernel, **shape, **base})
    used = {r["impl"] for r in records}
    kept = {DTYPES[d]: s for d, s in sources.items() if d in DTYPES and s in used}
    return Converted(records, kept, len(rows), skipped)


def read_table(path: Path) -> list[dict]:
    """A parquet table's rows as dicts (pandas and pyarrow: the [import] extra)."""
    try:
        import pandas  # noqa: PLC0415
    except ImportError:
        raise ConfigError("<cli>", "import aiconfigurator", "pandas and pyarrow are not installed; pip install "
                          "-e '.[import]'") from None
    try:
        return pandas.read_parquet(path).to_dict("records")
    except (OSError, ValueError, ImportError) as exc:
        raise ConfigError(str(path), "<root>", f"cannot read the table: {exc}"[:300]) from None


def import_records(system: str, backend: str, version: str | None = None, *, root: Path | None = None
                   ) -> tuple[list[dict], dict, dict[str, Converted]]:
    """(measurement records, device record, per-table conversions) of one system and backend."""
    root = root or data_root()
    versions = choose_versions(root, system, backend, version)
    converted, records, devices = {}, [], set()
    for table, (op, _) in TABLES.items():
        path = root / system / op / backend / versions[table] / table
        rows = read_table(path)
        devices.update(str(r.get("device")) for r in rows[:1000] if r.get("device"))
        converted[table] = c = convert(table, rows)
        records.extend(c.records)
    sys_ = SYSTEMS[system]
    gpu_name = sorted(devices)[0] if devices else system
    prov = {
        "source": f"{PACKAGE} {package_version()} (NVIDIA, Apache-2.0): systems/data/{system}/<op>/{backend}/<version>/, "
                  "collected by NVIDIA on real GPUs; latency ms -> time_s",
        "command": f"microbench import aiconfigurator --system {system} --backend {backend}"
                   + (f" --version {version}" if version else ""),
        "device": gpu_name,
        "framework": ", ".join(f"{TABLES[t][1]}: {backend} {v}" for t, v in versions.items()),
        "sm_count": str(sys_.sm_count),
        "tables": "; ".join(
            f"{t} ({backend} {versions[t]}): {c.rows:,} rows, {len([r for r in c.records if r['kernel'] != 'gemm_peak']):,} "
            f"kept ({', '.join(f'{d}: {s}' for d, s in sorted(c.sources.items()))})"
            for t, c in converted.items()),
        "datasheet": f"{', '.join(DATASHEET_KERNELS)}, PCIe, host times and the interconnect: datasheet "
                     f"{sys_.datasheet} (not in the tables)",
    }
    device = {"name": calibration_name(system, backend), "gpu_name": gpu_name, "provenance": prov}
    return records, device, converted


def build_calibration(records: list[dict], device: dict, base, *, folds: int = 5, grid: bool = False):
    """The fitted calibration: the kernels the tables hold fitted (microbench.fit, the GEMM with its
    tile/wave term, regimes, split-k and L2 residency on the datasheet SM count), every other number
    the datasheet ``base``'s; ``kernel_timing: device``."""
    from microbench.fit import fit  # noqa: PLC0415
    from microbench.gemm_tiles import measured_gemm_tiles  # noqa: PLC0415

    device = {**device, "memory_bytes": base.memory_bytes}
    cal = fit(records, device=device, base=base, name=device["name"], folds=folds, grid=grid,
              gemm_tiles=measured_gemm_tiles(device))
    return with_datasheet(cal, records, base)


def with_datasheet(cal, records: list[dict], base):
    """``cal`` (fitted on ``records``) with the datasheet ``base``'s numbers for what the tables
    lack, their provenance, ``kernel_timing: device`` and a one-line compute-peaks provenance."""
    prov = dict(cal.provenance)
    if "compute_peaks" in prov:  # fit_precision lists every shape; the tables hold hundreds
        peaks = [r for r in records if r["kernel"] == "gemm_peak"]
        modes = sorted({r["mode"] for r in peaks})
        prov["compute_peaks"] = (f"achieved, not the datasheet's: the best 2mnk / time per math mode over the tables' "
                                 f"{len(peaks):,} GEMMs with m, n and k >= {PEAK_MIN_DIM} ({', '.join(modes)})")
    for key in ("memory", "pcie", "interconnect"):  # where the datasheet numbers kept here come from
        if key in base.provenance:
            prov[key] = f"datasheet {base.name}: {base.provenance[key]}"
    precision = cal.precision
    if base.precision is not None and base.precision.dequant and precision is not None and not precision.dequant:
        precision = dataclasses.replace(  # weight-only kernels: not in the tables
            precision, dequant=dict(base.precision.dequant),
            dequant_source=f"datasheet {base.name}: {base.precision.dequant_source}")
    prov["datasheet_numbers"] = (f"hbm_bandwidth (the unfitted kernels' bandwidth), pcie_bandwidth, kernel_launch, "
                                 f"step_overhead, interconnect, profiles: {base.name}")
    return dataclasses.replace(
        cal, hbm_bandwidth_bytes_per_s=base.effective_bandwidth_bytes_per_s, bandwidth_efficiency=1.0,
        pcie_bandwidth_bytes_per_s=base.pcie_bandwidth_bytes_per_s, kernel_launch_s=base.kernel_launch_s,
        step_overhead_s=base.step_overhead_s, interconnect=base.interconnect, profiles=dict(base.profiles),
        kernel_timing="device", provenance=prov, precision=precision)

"""The measured all-reduce curves of aiconfigurator-core's communication tables (``microbench import
aiconfigurator``; microbench/aiconfigurator.py imports the kernels).

The package holds, per GPU system, two all-reduce tables measured on real GPUs in one node:

- ``comm/nccl/<NCCL version>/nccl_perf.parquet``: NCCL's collectives by GPU count and message size
  (the ``all_reduce`` rows in ``half``);
- ``comm/<backend>/<version>/custom_allreduce_perf.parquet``: the engine's own all-reduce kernel
  (vLLM's custom all-reduce, SGLang's, TensorRT-LLM's) in bf16, timed in a CUDA graph (``*_graph``,
  kept where the table has it: the engines replay their decode steps as graphs) and eagerly.

Both give ``message_size`` in elements of a 2-byte dtype (aiconfigurator's models query
``tokens x hidden``) and ``latency`` in milliseconds. Each becomes one curve per GPU count of
``interconnect.by_num_gpus`` (sim/calib/interconnect.py): NCCL's as ``allreduce_curve``, the
engine's as ``engine_allreduce_curve``, ``[bytes, seconds]`` points in increasing bytes (the median
where a size repeats). The top-level latency and bus bandwidth, the p2p numbers and the link stay
the datasheet calibration's. Which curve times a message is the engine profile's choice
(EngineProfile.custom_allreduce_bytes: the engine's kernel below its bound, NCCL above; NCCL for
every size on a PCIe link).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from pathlib import Path

from sim.calib.allreduce_curve import AllReduceCurve
from sim.calib.interconnect import CountNumbers, Interconnect

ELEMENT_BYTES = 2  # bf16 / half: the tables' message sizes are element counts
NCCL_TABLE = "nccl_perf.parquet"
ENGINE_TABLE = "custom_allreduce_perf.parquet"


def _versions(folder: Path, table: str) -> list[str]:
    from microbench.aiconfigurator import _version_key  # noqa: PLC0415

    found = [d.name for d in folder.iterdir() if (d / table).is_file()] if folder.is_dir() else []
    return sorted(found, key=_version_key)


def pick_version(found: list[str], wanted: str | None) -> str | None:
    """``wanted`` where the folder has it, else the newest version not after it, else the newest."""
    from microbench.aiconfigurator import _version_key  # noqa: PLC0415

    if not found:
        return None
    if wanted in found:
        return wanted
    older = [v for v in found if wanted is not None and _version_key(v) <= _version_key(wanted)]
    return (older or found)[-1]


def curves_of(rows: list[dict]) -> dict[int, AllReduceCurve]:
    """GPU count -> its curve from table rows (``num_gpus``, ``message_size`` in elements, ``latency``
    in ms); a count with fewer than two sizes is left out."""
    times: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        lat, n, size = r.get("latency"), r.get("num_gpus"), r.get("message_size")
        if lat is None or not lat > 0 or n is None or size is None or not size > 0:
            continue
        times[int(n)][int(size) * ELEMENT_BYTES].append(float(lat) * 1e-3)
    out = {}
    for n, by_size in times.items():
        sizes = sorted(by_size)
        if n >= 2 and len(sizes) >= 2:
            out[n] = AllReduceCurve(tuple(float(s) for s in sizes),
                                    tuple(float(f"{statistics.median(by_size[s]):.6g}") for s in sizes))
    return out


def engine_rows(rows: list[dict]) -> tuple[list[dict], str]:
    """The bf16 rows of the engine's kernel as timed in a CUDA graph where the table has that lane,
    else its one kernel with the most rows (TensorRT-LLM's ``TRTLLM``; the MNNVL lanes are multi-node)."""
    rows = [r for r in rows if str(r.get("allreduce_dtype", "bfloat16")) == "bfloat16"]
    sources = sorted({str(r.get("kernel_source")) for r in rows})
    graph = [s for s in sources if s.endswith("_graph")]
    if graph:
        kernel = graph[0]
    else:
        plain = [s for s in sources if "MNNVL" not in s] or sources
        kernel = max(plain, key=lambda s: sum(1 for r in rows if str(r.get("kernel_source")) == s))
    return [r for r in rows if str(r.get("kernel_source")) == kernel], kernel


def import_comm(root: Path, system: str, backend: str, version: str | None) -> tuple[dict[int, dict], str]:
    """(GPU count -> {"allreduce_curve": curve, "engine_allreduce_curve": curve}, a provenance line) of
    one system and backend; empty where the package has neither table."""
    from microbench.aiconfigurator import read_table  # noqa: PLC0415

    comm = root / system / "comm"
    out: dict[int, dict] = defaultdict(dict)
    said = []
    nccl_v = pick_version(_versions(comm / "nccl", NCCL_TABLE), None)
    if nccl_v is not None:
        rows = [r for r in read_table(comm / "nccl" / nccl_v / NCCL_TABLE)
                if r.get("op_name") == "all_reduce" and str(r.get("nccl_dtype")) == "half"]
        for n, c in curves_of(rows).items():
            out[n]["allreduce_curve"] = c
        said.append(f"NCCL {nccl_v} all_reduce (half; comm/nccl/{nccl_v}/{NCCL_TABLE}): GPU counts "
                    f"{', '.join(str(n) for n in sorted(out))}")
    engine_v = pick_version(_versions(comm / backend, ENGINE_TABLE), version)
    if engine_v is not None:
        rows, kernel = engine_rows(read_table(comm / backend / engine_v / ENGINE_TABLE))
        found = curves_of(rows)
        for n, c in found.items():
            out[n]["engine_allreduce_curve"] = c
        said.append(f"{backend} {engine_v}'s own all-reduce, {kernel} (bf16; comm/{backend}/{engine_v}/{ENGINE_TABLE}): "
                    f"GPU counts {', '.join(str(n) for n in sorted(found))}")
    line = ("; ".join(said) + ". Message sizes are elements of 2 bytes, latency ms -> s; the top-level latency and "
            "bus bandwidth, p2p and link are the datasheet's") if said else ""
    return dict(out), line


def with_comm(ic: Interconnect | None, curves: dict[int, dict]) -> Interconnect | None:
    """``ic`` with ``curves`` (import_comm) in its ``by_num_gpus``: a count's measured curves replace
    its curves there, its other numbers stay; None stays None (a GPU without an interconnect)."""
    if ic is None or not curves:
        return ic
    counts = dict(ic.by_num_gpus)
    for n, found in curves.items():
        counts[n] = dataclasses.replace(counts.get(n, CountNumbers()), **found)
    return dataclasses.replace(ic, by_num_gpus=tuple(sorted(counts.items())))


def attach_comm(cal, system: str, backend: str, version: str | None = None, root: Path | None = None):
    """``cal`` (an imported calibration of ``system`` under ``backend``) with the package's measured
    all-reduce curves in its interconnect and their provenance (``interconnect_curves``). ``version``:
    the backend's version the kernels were imported at (the engine table's, or the newest before it)."""
    from microbench.aiconfigurator import choose_versions, data_root  # noqa: PLC0415

    root = root or data_root()
    if version is None:
        version = choose_versions(root, system, backend, None)["gemm_perf.parquet"]
    curves, line = import_comm(root, system, backend, version)
    if not curves or cal.interconnect is None:
        return cal
    prov = {**cal.provenance, "interconnect_curves": f"measured by NVIDIA (aiconfigurator-core): {line}"}
    if "interconnect" in prov and "replaced by interconnect_curves" not in prov["interconnect"]:
        prov["interconnect"] += (" [by_num_gpus allreduce_curve and engine_allreduce_curve: replaced by "
                                 "interconnect_curves' measured tables]")
    return dataclasses.replace(cal, interconnect=with_comm(cal.interconnect, curves), provenance=prov)

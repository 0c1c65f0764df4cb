"""Fitting the interconnect timings (microbench.interconnect) to latency + bytes / bandwidth.

For each (operation, GPU count n) the records' times t over message sizes S are fitted to

    t = latency + S x factor / bandwidth

with nccl-tests' bus bandwidth convention (NVIDIA/nccl-tests doc/PERFORMANCE.md): the
factor is 2 (n - 1) / n for an all-reduce (busbw = algbw x 2 (n - 1) / n), (n - 1) / n for
an all-gather whose gathered result is S bytes, and 1 for a send/recv (algbw = busbw). The
fit is a non-negative least squares on relative residuals ((fit - t) / t), so a 4 KiB
message's microseconds count as much as a 256 MiB message's milliseconds, and its MAPE is
reported. ``to_interconnect`` writes the calibration's ``interconnect:`` section
(sim/calib/interconnect.py): the largest GPU count's all-reduce (the node's full
tensor-parallel width) as the top-level numbers, which a GPU count without its own serves,
and every measured count's all-reduce and all-gather fits under ``by_num_gpus``;
``provenance_text`` keeps every fit with its error in the calibration's provenance. Each
count's all-reduce times themselves go in as its ``allreduce_curve`` (the median time at each
size: sim/calib/allreduce_curve.py), which a tensor-parallel run's NCCL all-reduces take
between the sizes timed, where one latency and one bandwidth miss NCCL's mid-size times.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from sim.calib.allreduce_curve import AllReduceCurve
from sim.calib.interconnect import CountNumbers, Interconnect
from sim.errors import ConfigError, unlink_symlink

KERNELS = ("allreduce", "allgather", "sendrecv")
_BANDWIDTH = (1e6, 1e14)  # what sim/calib/interconnect.py accepts


def bus_factor(kernel: str, n: int) -> float:
    """Bytes each rank moves per byte of S, nccl-tests' busbw / algbw: 2(n-1)/n, (n-1)/n or 1."""
    return {"allreduce": 2.0 * (n - 1) / n, "allgather": (n - 1) / n}.get(kernel, 1.0)


@dataclass(frozen=True)
class LinkFit:
    kernel: str
    num_gpus: int
    latency_s: float
    bandwidth_bytes_per_s: float  # bus bandwidth (send/recv: algbw, the same)
    mape: float
    min_bytes: int
    max_bytes: int

    def predict(self, num_bytes: float) -> float:
        return self.latency_s + num_bytes * bus_factor(self.kernel, self.num_gpus) / self.bandwidth_bytes_per_s


def check_records(records, *, file: str = "<measurements>") -> list[dict]:
    """The interconnect records, validated: kernel, num_gpus >= 2, num_bytes > 0, 0 < time_s < 1e6."""
    if not isinstance(records, list) or not records:
        raise ConfigError(file, "<root>", "no interconnect measurement records")
    for i, rec in enumerate(records):
        where = f"record {i + 1}"
        if not isinstance(rec, dict) or rec.get("kernel") not in KERNELS:
            got = rec.get("kernel") if isinstance(rec, dict) else rec
            raise ConfigError(file, f"{where}.kernel", f"got {got!r}"[:200] + f"; allowed: {', '.join(KERNELS)}")
        for key, lo, hi in (("num_gpus", 2, 1 << 16), ("num_bytes", 1, 1 << 50), ("time_s", 0, 1e6)):
            v = rec.get(key)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v < hi
            if not ok or (key != "time_s" and not float(v).is_integer()) or (key == "time_s" and v <= 0):
                raise ConfigError(file, f"{where}.{key}", f"got {v!r}"[:200] + f"; allowed: a number in [{lo}, {hi:g})"
                                  + (", > 0" if key == "time_s" else ", whole"))
    return records


def fit_link(kernel: str, n: int, records: list[dict], *, file: str = "<measurements>") -> LinkFit:
    """One (operation, GPU count)'s latency and bandwidth (module docstring)."""
    sizes = np.array([float(r["num_bytes"]) for r in records])
    t = np.array([float(r["time_s"]) for r in records])
    key = f"{kernel} over {n} GPUs"
    if len(set(sizes.tolist())) < 2:
        raise ConfigError(file, key, "needs at least two message sizes to tell latency from bandwidth")
    # relative residuals: rows (1 / t, S / t) . (latency, seconds per byte) ~ 1
    (lat, per_byte), _ = nnls(np.column_stack([1.0 / t, sizes / t]), np.ones_like(t))
    if per_byte * sizes.max() <= 0.05 * (lat + per_byte * sizes.max()):  # bytes under 5% of the largest's time
        raise ConfigError(file, key, f"the time does not grow with the message size up to {int(sizes.max()):,} "
                          "bytes: no size was bandwidth-bound (time larger messages)")
    bw = bus_factor(kernel, n) / per_byte
    if not _BANDWIDTH[0] <= bw <= _BANDWIDTH[1]:
        raise ConfigError(file, key, f"fitted bandwidth {bw:.3g} B/s is outside {_BANDWIDTH[0]:g} to "
                          f"{_BANDWIDTH[1]:g}: the timings are not a link's")
    mape = float(np.mean(np.abs(lat + per_byte * sizes - t) / t))
    return LinkFit(kernel, n, float(lat), float(bw), mape, int(sizes.min()), int(sizes.max()))


def fit_links(records: list[dict], *, file: str = "<measurements>") -> dict[tuple[str, int], LinkFit]:
    """Every (operation, GPU count)'s fit, in the records' order."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for rec in check_records(records, file=file):
        groups.setdefault((rec["kernel"], int(rec["num_gpus"])), []).append(rec)
    return {key: fit_link(*key, recs, file=file) for key, recs in groups.items()}


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB/s"


def describe(f: LinkFit) -> str:
    """One line per fit, as calibrate prints it."""
    what = {"allreduce": "all-reduce busbw", "allgather": "all-gather busbw", "sendrecv": "send/recv"}[f.kernel]
    gpus = f"{f.num_gpus} GPUs" if f.kernel != "sendrecv" else "GPU 0 -> 1"
    return (f"{what:16s} {gpus:10s} {_gb(f.bandwidth_bytes_per_s):>12s}, latency {f.latency_s * 1e6:7.1f} us "
            f"(MAPE {f.mape:.1%} over {f.min_bytes:,}-{f.max_bytes:,} B)")


def allreduce_curves(records: list[dict]) -> dict[int, AllReduceCurve]:
    """Each GPU count's all-reduce curve: the median time at each size timed (two sizes or more)."""
    times: dict[int, dict[int, list[float]]] = {}
    for rec in records:
        if rec["kernel"] == "allreduce":
            times.setdefault(int(rec["num_gpus"]), {}).setdefault(int(rec["num_bytes"]), []).append(float(rec["time_s"]))
    return {n: AllReduceCurve(tuple(float(s) for s in sorted(by)), tuple(float(np.median(by[s])) for s in sorted(by)))
            for n, by in times.items() if len(by) >= 2}


def to_interconnect(fits: dict[tuple[str, int], LinkFit], *, link: str, source: str,
                    records: list[dict] | None = None) -> Interconnect:
    """The calibration section: the largest GPU count's all-reduce at the top level, every
    count's all-reduce and all-gather under ``by_num_gpus`` (with its measured all-reduce curve
    when ``records`` are given), send/recv as the p2p numbers."""
    counts = sorted(n for kernel, n in fits if kernel == "allreduce")
    if not counts:
        raise ConfigError("<measurements>", "allreduce", "no all-reduce was measured")
    ar = fits[("allreduce", counts[-1])]
    p2p = fits.get(("sendrecv", 2))
    return Interconnect(allreduce_bus_bandwidth_bytes_per_s=ar.bandwidth_bytes_per_s,
                        allreduce_latency_s=ar.latency_s, link=link, source=source,
                        p2p_bandwidth_bytes_per_s=p2p.bandwidth_bytes_per_s if p2p else None,
                        p2p_latency_s=p2p.latency_s if p2p else None,
                        by_num_gpus=by_num_gpus(fits, allreduce_curves(records or [])))


def by_num_gpus(fits: dict[tuple[str, int], LinkFit],
                curves: dict[int, AllReduceCurve] | None = None) -> tuple[tuple[int, CountNumbers], ...]:
    """Each measured GPU count's all-reduce and all-gather (a count missing one leaves it to the top
    level), and its all-reduce curve from ``curves``."""
    curves = curves or {}
    out = []
    for n in sorted({n for kernel, n in fits if kernel in ("allreduce", "allgather")}):
        ar, ag = fits.get(("allreduce", n)), fits.get(("allgather", n))
        out.append((n, CountNumbers(
            allreduce_bus_bandwidth_bytes_per_s=ar.bandwidth_bytes_per_s if ar else None,
            allreduce_latency_s=ar.latency_s if ar else None,
            allgather_bus_bandwidth_bytes_per_s=ag.bandwidth_bytes_per_s if ag else None,
            allgather_latency_s=ag.latency_s if ag else None, allreduce_curve=curves.get(n))))
    return tuple(out)


def provenance_text(fits: dict[tuple[str, int], LinkFit], *, setup: str) -> str:
    """The calibration's ``provenance.interconnect``: how it was measured and every fit."""
    def one(f: LinkFit) -> str:
        return f"{_gb(f.bandwidth_bytes_per_s)}, {f.latency_s * 1e6:.1f} us (MAPE {f.mape:.0%})"

    parts = []
    for kernel, label in (("allreduce", "all-reduce busbw"), ("allgather", "all-gather busbw")):
        rows = [f"{n} GPUs {one(f)}" for (k, n), f in sorted(fits.items()) if k == kernel]
        if rows:
            parts.append(f"{label}, latency: " + "; ".join(rows))
    if (f := fits.get(("sendrecv", 2))) is not None:
        parts.append(f"send/recv GPU 0 -> 1: {one(f)}")
    sizes = [f.min_bytes for f in fits.values()] + [f.max_bytes for f in fits.values()]
    return (f"measured: {setup}; each fitted as time = latency + bytes x factor / bandwidth over "
            f"{min(sizes):,}-{max(sizes):,} B messages, busbw as nccl-tests defines it (NVIDIA/nccl-tests "
            "doc/PERFORMANCE.md: all-reduce algbw x 2(n-1)/n, all-gather algbw x (n-1)/n). "
            + ". ".join(parts) + ". The interconnect section holds every count's all-reduce and all-gather "
            "under by_num_gpus (with its all-reduce times as allreduce_curve), the largest count's all-reduce "
            "at its top level (for counts not measured) and send/recv as p2p")


def read_records(path: str | Path) -> tuple[list[dict], dict | None]:
    """(records, device record or None) of an ``.interconnect.jsonl`` file, for a refit."""
    file = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(file, "<root>", f"cannot read measurements: {exc}") from None
    records, device = [], None
    for i, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise ConfigError(file, f"line {i}", f"not JSON: {exc}"[:300]) from None
        if isinstance(rec, dict) and rec.get("record") == "device":
            device = rec
        else:
            records.append(rec)
    return check_records(records, file=file), device


def write_records(path: str | Path, records: list[dict], device: dict | None) -> None:
    unlink_symlink(path)
    with open(path, "w", encoding="utf-8") as f:
        if device is not None:
            f.write(json.dumps({"record": "device", **device}) + "\n")
        for rec in records:
            f.write(json.dumps(rec) + "\n")

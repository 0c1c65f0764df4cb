"""The GPUs' interconnect: how fast a tensor-parallel replica's collectives run.

An optional calibration section (schema 1 and 2; sim/calib/calibration.py reads it)::

    interconnect:
      allreduce_bus_bandwidth_bytes_per_s: 4.0e+11   # achieved NCCL all-reduce bus bandwidth
      allreduce_latency_s: 8.0e-06                   # a small all-reduce's time (latency-bound)
      p2p_bandwidth_bytes_per_s: 3.6e+11             # optional: one GPU to another, one direction
      p2p_latency_s: 8.0e-06                         # optional
      link: nvlink4                                  # nvlink2-5, pcie3-5, xgmi (AMD Infinity Fabric)
      source: text                                   # optional: where the numbers come from
      by_num_gpus:                                   # optional: numbers measured at one GPU count
        2: {allreduce_bus_bandwidth_bytes_per_s: 3.5e+11, allreduce_latency_s: 6.0e-06,
            allgather_bus_bandwidth_bytes_per_s: 3.3e+11, allgather_latency_s: 5.0e-06}
        8: {allreduce_latency_s: 1.2e-05,            # each key optional
            allreduce_curve: [[262144, 4.5e-05], [16777216, 2.45e-04]],  # NCCL's measured times
            engine_allreduce_curve: [[256, 4.3e-06], [1048576, 1.24e-05]]}  # the engine's own kernel's

Bus bandwidth is nccl-tests' ``busbw`` (NVIDIA/nccl-tests doc/PERFORMANCE.md): for an
all-reduce of S bytes over n GPUs, busbw = S / time x 2 (n - 1) / n, which makes it
comparable across GPU counts and to the link's per-direction bandwidth. So a ring
all-reduce takes

    allreduce_s(S, n) = allreduce_latency_s + 2 (n - 1) / n x S / allreduce_bus_bandwidth

and an all-gather whose result is S bytes, (n - 1) / n x S / bus bandwidth plus the same
latency (NCCL's all-gather busbw is S / time x (n - 1) / n; taken equal to the all-reduce's).

Bus bandwidth and latency differ with the GPU count (a ring over 8 GPUs has more hops than
over 2; NVSwitch's in-network reduction changes the picture again), so ``by_num_gpus`` may
give an exact count its own all-reduce and all-gather numbers (microbench calibrate writes one
entry per GPU count it timed). A collective over n GPUs takes each number from
``by_num_gpus[n]`` when that key is there, else from the top level: the top-level all-reduce
numbers for the all-reduce, and (as without the section) for the all-gather too. There is no
interpolation between counts: a count without an entry uses the top level.

An entry's ``allreduce_curve`` holds NCCL's all-reduce time measured at a few message sizes
(sim/calib/allreduce_curve.py). NCCL's mid-size messages take far longer than the latency +
bandwidth form says, while an engine's own one-shot kernel for small messages takes about what
it says; so which form times an all-reduce is the engine's choice (``engine_allreduce``, set
from the run's engine profile, EngineProfile.custom_allreduce_bytes): messages below the engine's
bound for the GPU count take the form above, larger ones the curve. On a PCIe link every
all-reduce runs NCCL (the engines' custom kernels need NVLink peer access: TensorRT-LLM's AUTO
falls back to NCCL without it); so on the host-staged interconnect of GPUs without peer access
(link ``shm``, ``engine.gpu_p2p: false``: sim/calib/host_staged.py), whatever the profile. Without a curve for the count, or without an engine choice
(the ``eager`` profile), the form above times every size. An entry's ``engine_allreduce_curve``
holds the engine's own kernel's measured times (``microbench import aiconfigurator`` reads them
from the engine's custom all-reduce tables); where it is there, it times the messages below the
engine's bound instead of the form (not on a PCIe link, where NCCL times every size).

The p2p numbers time pipeline parallelism's activation transfers between stages: a send of
S bytes from one GPU to the next takes ``p2p_latency_s + S / p2p_bandwidth_bytes_per_s``
(``p2p_s``); a run with ``engine.pipeline_parallel_size`` > 1 on a calibration without them is
an error naming the calibration file and the missing key (``require_p2p``). A run with ``engine.tensor_parallel_size`` > 1 on a calibration without the section
is an error naming the calibration file and ``interconnect``: there is no silent default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.calib.allreduce_curve import AllReduceCurve, curve_from_list, curve_to_list
from sim.calib.numbers import number_in
from sim.errors import ConfigError

LINKS = ("nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie3", "pcie4", "pcie5", "xgmi")
#: GPUs without peer access (engine.gpu_p2p: false): NCCL through host memory for every size, the
#: engines' own kernels off (sim/calib/host_staged.py builds it; no calibration file names it)
SHM = "shm"
_BANDWIDTH = (1e6, 1e14)  # bytes per second: as pcie_bandwidth_bytes_per_s
_LATENCY = (0.0, 1.0)  # seconds
#: key -> (range, required)
_KEYS: dict[str, tuple[tuple[float, float], bool]] = {
    "allreduce_bus_bandwidth_bytes_per_s": (_BANDWIDTH, True),
    "allreduce_latency_s": (_LATENCY, True),
    "p2p_bandwidth_bytes_per_s": (_BANDWIDTH, False),
    "p2p_latency_s": (_LATENCY, False),
}
#: the keys of one ``by_num_gpus`` entry, all optional
_COUNT_KEYS: dict[str, tuple[float, float]] = {
    "allreduce_bus_bandwidth_bytes_per_s": _BANDWIDTH,
    "allreduce_latency_s": _LATENCY,
    "allgather_bus_bandwidth_bytes_per_s": _BANDWIDTH,
    "allgather_latency_s": _LATENCY,
}
_NUM_GPUS = (2, 1024)  # the GPU counts a by_num_gpus entry may name
_ALLOWED = (*_KEYS, "link", "source", "by_num_gpus")
_CURVE = "allreduce_curve"  # a by_num_gpus entry's measured NCCL times (sim/calib/allreduce_curve.py)
_ENGINE_CURVE = "engine_allreduce_curve"  # ... and its engine's own kernel's
_CURVES = (_CURVE, _ENGINE_CURVE)


@dataclass(frozen=True)
class CountNumbers:
    """One ``by_num_gpus`` entry: the collectives' numbers at one GPU count (None: the top level's)."""

    allreduce_bus_bandwidth_bytes_per_s: float | None = None
    allreduce_latency_s: float | None = None
    allgather_bus_bandwidth_bytes_per_s: float | None = None
    allgather_latency_s: float | None = None
    allreduce_curve: AllReduceCurve | None = None  # NCCL's measured all-reduce times (no top-level one)
    engine_allreduce_curve: AllReduceCurve | None = None  # the engine's own kernel's measured times


@dataclass(frozen=True)
class Interconnect:
    """A calibration's ``interconnect`` section; rates in bytes per second, times in seconds."""

    allreduce_bus_bandwidth_bytes_per_s: float
    allreduce_latency_s: float
    link: str
    p2p_bandwidth_bytes_per_s: float | None = None
    p2p_latency_s: float | None = None
    source: str | None = None
    #: ((GPU count, its numbers), ...) in increasing count: ``by_num_gpus`` (module docstring)
    by_num_gpus: tuple[tuple[int, CountNumbers], ...] = ()
    #: the engine's all-reduce choice (module docstring; None: the latency + bandwidth form for every
    #: size): ((largest GPU count, bytes), ...) in increasing count; an all-reduce over n GPUs runs the
    #: engine's own kernel below the bytes of the first entry whose count is >= n, NCCL from there on
    engine_allreduce: tuple[tuple[int, float], ...] | None = None

    def numbers(self, num_gpus: int) -> CountNumbers:
        """The four collective numbers used at ``num_gpus`` GPUs: the exact count's entry, else the top level's."""
        own = dict(self.by_num_gpus).get(num_gpus, CountNumbers())
        bw, lat = self.allreduce_bus_bandwidth_bytes_per_s, self.allreduce_latency_s
        pick = lambda v, top: top if v is None else v  # noqa: E731
        return CountNumbers(pick(own.allreduce_bus_bandwidth_bytes_per_s, bw), pick(own.allreduce_latency_s, lat),
                            pick(own.allgather_bus_bandwidth_bytes_per_s, bw), pick(own.allgather_latency_s, lat),
                            own.allreduce_curve, own.engine_allreduce_curve)

    def nccl_curve(self, num_gpus: int) -> tuple[AllReduceCurve, float] | None:
        """(NCCL's measured curve, the smallest message it times) for an all-reduce over ``num_gpus``
        GPUs under the engine's choice (module docstring); None where the latency + bandwidth form
        times every size (no curve for the count, or no engine choice)."""
        curve = self.numbers(num_gpus).allreduce_curve
        if curve is None or (self.engine_allreduce is None and self.link != SHM):
            return None
        if self.link.startswith("pcie") or self.link == SHM:
            return curve, 0.0
        return curve, next((b for count, b in self.engine_allreduce if num_gpus <= count), 0.0)

    def engine_curve(self, num_gpus: int) -> tuple[AllReduceCurve, float] | None:
        """(the engine's own kernel's measured curve, the engine's bound: it times the messages
        below it) over ``num_gpus`` GPUs (module docstring); None where the latency + bandwidth
        form times them (no such curve for the count, no engine kernel at the count, or a PCIe link)."""
        curve = self.numbers(num_gpus).engine_allreduce_curve
        if curve is None or self.engine_allreduce is None or self.link.startswith("pcie") or self.link == SHM:
            return None
        bound = next((b for count, b in self.engine_allreduce if num_gpus <= count), 0.0)
        return (curve, bound) if bound > 0 else None

    def allreduce_latency(self, num_gpus: int) -> float:
        """A small all-reduce's time over ``num_gpus`` GPUs."""
        return self.numbers(num_gpus).allreduce_latency_s

    def allgather_latency(self, num_gpus: int) -> float:
        """A small all-gather's time over ``num_gpus`` GPUs."""
        return self.numbers(num_gpus).allgather_latency_s

    def allreduce_s_per_byte(self, num_gpus: int) -> float:
        """Seconds per byte of a ring all-reduce over ``num_gpus`` GPUs: 2 (n - 1) / n / busbw."""
        return 2.0 * (num_gpus - 1) / num_gpus / self.numbers(num_gpus).allreduce_bus_bandwidth_bytes_per_s

    def allgather_s_per_byte(self, num_gpus: int) -> float:
        """Seconds per gathered byte of a ring all-gather over ``num_gpus`` GPUs: (n - 1) / n / busbw."""
        return (num_gpus - 1) / num_gpus / self.numbers(num_gpus).allgather_bus_bandwidth_bytes_per_s

    def allreduce_s(self, num_bytes: float, num_gpus: int) -> float:
        """One ring all-reduce of ``num_bytes`` over ``num_gpus`` GPUs (0 for one GPU)."""
        if num_gpus <= 1:
            return 0.0
        nccl = self.nccl_curve(num_gpus)
        if nccl is not None and num_bytes >= nccl[1]:
            return nccl[0].seconds(num_bytes, self.allreduce_s_per_byte(num_gpus), self.allreduce_latency(num_gpus))
        own = self.engine_curve(num_gpus)
        if own is not None and num_bytes < own[1]:
            return own[0].seconds(num_bytes, self.allreduce_s_per_byte(num_gpus), self.allreduce_latency(num_gpus))
        return self.allreduce_latency(num_gpus) + num_bytes * self.allreduce_s_per_byte(num_gpus)

    def p2p_s(self, num_bytes: float) -> float:
        """One point-to-point send of ``num_bytes`` to the next GPU: latency + bytes / bandwidth.
        Only on an interconnect with p2p numbers (``require_p2p``)."""
        return self.p2p_latency_s + num_bytes / self.p2p_bandwidth_bytes_per_s

    def allgather_s(self, num_bytes: float, num_gpus: int) -> float:
        """One all-gather whose gathered result is ``num_bytes`` (0 for one GPU)."""
        if num_gpus <= 1:
            return 0.0
        return self.allgather_latency(num_gpus) + num_bytes * self.allgather_s_per_byte(num_gpus)


def interconnect_from_dict(data: Any, *, file: str) -> Interconnect | None:
    """The parsed ``interconnect:`` section (None when absent); one-line ConfigError otherwise."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigError(file, "interconnect", f"expected a mapping with keys from: {', '.join(_ALLOWED)}")
    for key in data:
        if key not in _ALLOWED:
            raise ConfigError(file, f"interconnect.{key}", f"unknown key; allowed: {', '.join(_ALLOWED)}")
    values: dict[str, Any] = {}
    for key, ((lo, hi), required) in _KEYS.items():
        if key in data:
            values[key] = number_in(data[key], file, f"interconnect.{key}", lo, hi)
        elif required:
            raise ConfigError(file, f"interconnect.{key}", "required key missing")
    link = data.get("link")
    if link not in LINKS:
        raise ConfigError(file, "interconnect.link", f"got {link!r}; allowed: {', '.join(LINKS)}")
    source = data.get("source")
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise ConfigError(file, "interconnect.source", f"expected a non-empty string, got {source!r}")
    return Interconnect(link=link, source=source, by_num_gpus=_counts_from_dict(data.get("by_num_gpus"), file),
                        **values)


def _count_key(key: Any, file: str) -> int:
    """A ``by_num_gpus`` key: a GPU count (YAML reads ``2:`` as an int, JSON as ``"2"``)."""
    text = key.strip() if isinstance(key, str) else ""
    n = int(text) if text.isascii() and text.isdigit() and len(text) < 8 else key
    if isinstance(n, bool) or not isinstance(n, int) or not _NUM_GPUS[0] <= n <= _NUM_GPUS[1]:
        raise ConfigError(file, f"interconnect.by_num_gpus.{str(key)[:40]}",
                          f"not a GPU count; allowed: whole numbers from {_NUM_GPUS[0]} to {_NUM_GPUS[1]}")
    return n


def _counts_from_dict(data: Any, file: str) -> tuple[tuple[int, CountNumbers], ...]:
    """The parsed ``by_num_gpus`` mapping, in increasing GPU count; () when absent."""
    if data is None:
        return ()
    where = "interconnect.by_num_gpus"
    if not isinstance(data, dict):
        raise ConfigError(file, where, f"expected a mapping of GPU count to numbers, got {data!r}"[:300])
    out: dict[int, CountNumbers] = {}
    for key, entry in data.items():
        n = _count_key(key, file)
        if n in out:
            raise ConfigError(file, f"{where}.{key}", f"GPU count {n} is given twice")
        if not isinstance(entry, dict):
            raise ConfigError(file, f"{where}.{key}", f"expected a mapping with keys from: {', '.join(_COUNT_KEYS)}")
        for name in entry:
            if name not in _COUNT_KEYS and name not in _CURVES:
                allowed = ", ".join((*_COUNT_KEYS, *_CURVES))
                raise ConfigError(file, f"{where}.{key}.{name}", f"unknown key; allowed: {allowed}")
        curves = {name: curve_from_list(entry[name], file=file, key=f"{where}.{key}.{name}")
                  for name in _CURVES if name in entry}
        out[n] = CountNumbers(**{name: number_in(entry[name], file, f"{where}.{key}.{name}", lo, hi)
                                 for name, (lo, hi) in _COUNT_KEYS.items() if name in entry}, **curves)
    return tuple(sorted(out.items()))


def interconnect_to_dict(ic: Interconnect | None) -> dict:
    """``{"interconnect": {...}}`` for a calibration YAML (inverse of interconnect_from_dict); {} for None."""
    if ic is None:
        return {}
    out: dict[str, Any] = {key: float(f"{getattr(ic, key):.6g}") for key in _KEYS if getattr(ic, key) is not None}
    out["link"] = ic.link
    if ic.source:
        out["source"] = ic.source
    if ic.by_num_gpus:
        out["by_num_gpus"] = {n: {key: float(f"{getattr(c, key):.6g}") for key in _COUNT_KEYS
                                  if getattr(c, key) is not None}
                              | {name: curve_to_list(getattr(c, name)) for name in _CURVES if getattr(c, name)}
                              for n, c in ic.by_num_gpus}
    return {"interconnect": out}


def require_interconnect(cal: Any, num_gpus: int) -> Interconnect | None:
    """``cal``'s interconnect when ``num_gpus`` > 1 (None for one GPU); a ConfigError naming the
    calibration file and ``interconnect`` when it has none."""
    if num_gpus <= 1:
        return None
    ic = getattr(cal, "interconnect", None)
    if ic is None:
        raise ConfigError(getattr(cal, "file", "<calibration>"), "interconnect", (
            f"engine.tensor_parallel_size {num_gpus} needs the GPUs' interconnect and this calibration has"
            " none: add an interconnect: section (allreduce_bus_bandwidth_bytes_per_s, allreduce_latency_s,"
            " link; see calibrations/h100-sxm.yaml) or use tensor_parallel_size 1"))
    return ic


def require_p2p(cal: Any, num_stages: int) -> Interconnect | None:
    """``cal``'s interconnect when ``num_stages`` > 1 pipeline stages send activations to each other
    (None for one stage); a ConfigError naming the calibration file and the missing section or key."""
    if num_stages <= 1:
        return None
    file = getattr(cal, "file", "<calibration>")
    ic = getattr(cal, "interconnect", None)
    key = ("interconnect" if ic is None else "interconnect.p2p_bandwidth_bytes_per_s"
           if ic.p2p_bandwidth_bytes_per_s is None else "interconnect.p2p_latency_s" if ic.p2p_latency_s is None
           else None)
    if key is not None:
        raise ConfigError(file, key, (
            f"engine.pipeline_parallel_size {num_stages} sends activations between GPUs and this calibration has no"
            " point-to-point link numbers: add p2p_bandwidth_bytes_per_s and p2p_latency_s to its interconnect:"
            " section (see calibrations/h100-sxm.yaml) or use pipeline_parallel_size 1"))
    return ic


__all__ = ["LINKS", "SHM", "CountNumbers", "Interconnect", "interconnect_from_dict", "interconnect_to_dict", "require_interconnect",
           "require_p2p"]

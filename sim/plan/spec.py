"""A plan file: YAML in, a validated :class:`PlanSpec` with every configuration out.

::

    name: plan-chatbot                # optional (default: the file's stem)
    scenario: chatbot.yaml            # a scenario file, relative to the plan file ...
    base: {model: ..., workload: ...} # ... or the scenario inline (exactly one of the two)
    slo: {ttft_s: 1.0, tpot_s: 0.05, percentile: 95, attainment: 0.95}
    target_rate: 20                   # requests/s the deployment must serve
    space: {gpu: [a100-80gb, h100-sxm], scheduler.max_num_seqs: [64, 256]}
    prices: {a100-80gb: 1.79}         # optional: $ per GPU-hour, over sim/plan/prices.yaml
    search: {min_rate: 0.5, max_rate: 64, tolerance: 0.05, num_requests: 300,
             min_duration_s: 60, warmup: 0.1, confirm_duration_s: 600}

Every configuration (the cartesian product of ``space``, the last key fastest) must
validate as a scenario (``parse_scenario``), or the plan is a ConfigError (exit 2) naming
the plan file and the searched key (``space.<key>``) behind it. ``cluster.*`` keys make a
configuration a *unit* of several replicas behind a router (sim/plan/unit.py). Memory
feasibility is not checked here: a configuration whose weights or one full-length request
do not fit is reported ``infeasible`` by the search (sim/plan/search.py).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from sim.config.scenario import parse_scenario, read_yaml, set_override
from sim.errors import ConfigError
from sim.plan.prices import load_prices
from sim.plan.unit import PIPELINE_KEYS, check_cluster_key, check_modelled, is_cluster_key, unit_shape

TOP_KEYS = ("name", "description", "scenario", "base", "slo", "target_rate", "space", "prices", "search")
SLO_KEYS = ("ttft_s", "tpot_s", "percentile", "attainment")
SEARCH_DEFAULTS = {"min_rate": 0.5, "max_rate": 64.0, "tolerance": 0.05, "num_requests": 600, "reuse": True,
                   "min_duration_s": 60.0, "warmup": 0.1, "confirm_duration_s": 600.0}
#: The most requests one probe (or confirmation run) simulates, however high its rate.
MAX_PROBE_REQUESTS = 200_000
#: Keys the plan itself sets in every probe: the space may not vary them.
RESERVED = ("workload.arrival.rate", "workload.num_requests", "workload.duration_s", "seed", "slo")
MAX_CONFIGS = 4096


@dataclass(frozen=True)
class SLOTarget:
    ttft_s: float
    tpot_s: float
    percentile: float  # e.g. 95: the TTFT and TPOT percentiles that must hold
    attainment: float  # share of requests that must meet both (0..1]


@dataclass(frozen=True)
class SearchSpec:
    min_rate: float
    max_rate: float
    tolerance: float  # relative width of the final bracket
    num_requests: int  # per probe, at least (probe_requests)
    reuse: bool = True  # bracket reuse along a pool key (sim/plan/reuse.py)
    # (a plan file's defaults are SEARCH_DEFAULTS'; these, none, are for searches built in code)
    min_duration_s: float = 0.0  # a probe's arrivals span at least this many simulated seconds
    warmup: float = 0.0  # share of a probe's requests (the earliest arrivals) not judged
    confirm_duration_s: float = 0.0  # the answer's rate rerun this long (0: no confirmation run)

    def probe_requests(self, rate: float, duration_s: float | None = None) -> int:
        """Requests a probe at ``rate`` simulates: ``num_requests``, or more so that its arrivals
        span ``duration_s`` (default ``min_duration_s``) simulated seconds; at most
        MAX_PROBE_REQUESTS."""
        span = self.min_duration_s if duration_s is None else duration_s
        return int(min(max(self.num_requests, math.ceil(rate * span)), MAX_PROBE_REQUESTS))


@dataclass(frozen=True)
class PlanConfig:
    index: int
    values: dict  # space key -> value
    data: dict  # the scenario mapping (rate still the base's; the search sets it)
    source: str  # the file relative paths in ``data`` resolve against
    gpu: str
    tensor_parallel_size: int
    price_per_gpu_hour: float
    pipeline_parallel_size: int = 1  # a replica is tensor x pipeline parallel GPUs
    unit: dict | None = None  # in a plan with units: sim/plan/unit.py's unit_shape; else None


@dataclass(frozen=True)
class PlanSpec:
    path: str
    name: str
    slo: SLOTarget
    target_rate: float
    search: SearchSpec
    keys: tuple[str, ...]
    configs: tuple[PlanConfig, ...]
    prices: dict  # gpu -> {"usd_per_gpu_hour", "source", ...}
    clustered: bool = False  # some configuration is a unit of several replicas (sim/plan/unit.py)


def _number(path: str, key: str, value, *, low: float, high: float | None = None,
            low_open: bool = True, integer: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if integer:
        ok = ok and float(value).is_integer()
    if ok:
        ok = (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        kind = "an integer" if integer else "a number"
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        raise ConfigError(path, key, f"got {value!r}; expected {kind} {bound}")
    return int(value) if integer else float(value)


def _mapping(path: str, key: str, value, allowed) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(path, key, f"expected a mapping with keys {', '.join(allowed)}")
    for k in value:
        if k not in allowed:
            raise ConfigError(path, f"{key}.{k}", f"unknown key; allowed: {', '.join(allowed)}")
    return value


def _slo(path: str, raw) -> SLOTarget:
    raw = _mapping(path, "slo", raw, SLO_KEYS)
    for k in SLO_KEYS:
        if k not in raw:
            raise ConfigError(path, f"slo.{k}", "required key is missing (slo needs ttft_s, tpot_s, "
                              "percentile and attainment)")
    return SLOTarget(_number(path, "slo.ttft_s", raw["ttft_s"], low=0),
                     _number(path, "slo.tpot_s", raw["tpot_s"], low=0),
                     _number(path, "slo.percentile", raw["percentile"], low=0, high=100),
                     _number(path, "slo.attainment", raw["attainment"], low=0, high=1))


def _search(path: str, raw) -> SearchSpec:
    raw = {**SEARCH_DEFAULTS, **_mapping(path, "search", raw or {}, tuple(SEARCH_DEFAULTS))}
    s = SearchSpec(_number(path, "search.min_rate", raw["min_rate"], low=0),
                   _number(path, "search.max_rate", raw["max_rate"], low=0),
                   _number(path, "search.tolerance", raw["tolerance"], low=0, high=1),
                   _number(path, "search.num_requests", raw["num_requests"], low=10, low_open=False,
                           high=1_000_000, integer=True),
                   raw["reuse"],
                   _number(path, "search.min_duration_s", raw["min_duration_s"], low=0, low_open=False,
                           high=86_400),
                   _number(path, "search.warmup", raw["warmup"], low=0, low_open=False, high=0.5),
                   _number(path, "search.confirm_duration_s", raw["confirm_duration_s"], low=0,
                           low_open=False, high=86_400))
    if not isinstance(s.reuse, bool):
        raise ConfigError(path, "search.reuse", f"got {s.reuse!r}; expected true or false")
    if s.max_rate < s.min_rate:
        raise ConfigError(path, "search.max_rate", f"{s.max_rate:g} is below search.min_rate {s.min_rate:g}")
    return s


def _space(path: str, raw) -> dict:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(path, "space", "expected a non-empty mapping of scenario key path -> list of "
                          "values, e.g. {gpu: [a100-80gb, h100-sxm]}")
    for key, values in raw.items():
        if not isinstance(key, str) or not key or not all(key.split(".")):
            raise ConfigError(path, f"space.{key}", "expected a scenario key path such as engine.kv_dtype")
        if any(key == r or key.startswith(r + ".") for r in RESERVED):
            raise ConfigError(path, f"space.{key}", f"the plan sets this key itself ({', '.join(RESERVED)}); "
                              "search over other keys")
        if is_cluster_key(key):
            check_cluster_key(path, key)
        if not isinstance(values, list) or not values:
            raise ConfigError(path, f"space.{key}", "expected a non-empty list of values")
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise ConfigError(path, f"space.{key}", "a value is repeated")
    if math.prod(len(v) for v in raw.values()) > MAX_CONFIGS:
        raise ConfigError(path, "space", f"more than {MAX_CONFIGS} configurations; narrow the space")
    return raw


def _base(path: str, doc: dict) -> tuple[dict, str]:
    if ("scenario" in doc) == ("base" in doc):
        raise ConfigError(path, "base", "give exactly one of base: (a scenario mapping) or scenario: (a file)")
    if "scenario" in doc:
        if not isinstance(doc["scenario"], str) or not doc["scenario"]:
            raise ConfigError(path, "scenario", "expected the path of a scenario file")
        source = str(Path(path).parent / doc["scenario"])
        data = read_yaml(source)
    else:
        source, data = path, doc["base"]
    if not isinstance(data, dict):
        raise ConfigError(source, "base", "a scenario must be a YAML mapping of keys to values")
    data = copy.deepcopy(data)
    wl = data.get("workload")
    if not isinstance(wl, dict) or not isinstance(wl.get("arrival"), dict) or "rate" not in wl["arrival"]:
        raise ConfigError(source, "workload.arrival", "the plan varies workload.arrival.rate: the scenario "
                          "needs a poisson, gamma or constant arrival with a rate (not a trace)")
    return data, source


def load_plan(path: str) -> PlanSpec:
    doc = read_yaml(path)
    if not isinstance(doc, dict):
        raise ConfigError(path, "<top>", f"a plan must be a YAML mapping with keys {', '.join(TOP_KEYS)}")
    for k in doc:
        if k not in TOP_KEYS:
            raise ConfigError(path, str(k), f"unknown key; allowed: {', '.join(TOP_KEYS)}")
    for k in ("slo", "target_rate", "space"):
        if k not in doc:
            raise ConfigError(path, k, "required key is missing")
    slo = _slo(path, doc["slo"])
    target = _number(path, "target_rate", doc["target_rate"], low=0)
    search = _search(path, doc.get("search"))
    space = _space(path, doc["space"])
    prices = load_prices(path, doc.get("prices"))
    base, source = _base(path, doc)
    wl = base["workload"]
    wl.pop("duration_s", None)
    wl["num_requests"] = search.num_requests
    base["slo"] = {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s}
    keys = tuple(space)
    configs, shapes = [], []
    for index, combo in enumerate(itertools.product(*space.values())):
        data = copy.deepcopy(base)
        for key, value in zip(keys, combo):
            set_override(data, f"{key}={json.dumps(value)}", source=f"{path}: space")
        values = dict(zip(keys, combo))
        try:  # every configuration is a valid scenario (its pools too), or exit 2
            sc = parse_scenario(data, source)
            shape = unit_shape(sc)
        except ConfigError as exc:
            raise _in_space(path, values, exc) from None
        try:  # what the engine does not simulate (pipeline-parallel unit shapes): its own error
            check_modelled(sc)
        except ConfigError as exc:
            raise _in_space(path, values, exc, PIPELINE_KEYS) from None
        if sc.gpu not in prices:
            raise ConfigError(path, "prices", f"no price for gpu {sc.gpu!r}; shipped: "
                              f"{', '.join(sorted(prices))}; add prices: {{{sc.gpu}: USD_PER_GPU_HOUR}}")
        shapes.append(shape)
        configs.append(PlanConfig(index, values, data, source, sc.gpu,
                                  sc.engine.tensor_parallel_size, prices[sc.gpu]["usd_per_gpu_hour"],
                                  sc.engine.pipeline_parallel_size))
    clustered = any(s["num_replicas"] > 1 for s in shapes)
    if clustered:  # every configuration is a unit (of one replica, for the single ones)
        configs = [dataclasses.replace(c, unit=s) for c, s in zip(configs, shapes)]
    name = doc.get("name") or Path(path).stem
    return PlanSpec(path, str(name), slo, target, search, keys, tuple(configs),
                    {c.gpu: prices[c.gpu] for c in configs}, clustered)


def _in_space(path: str, values: dict, exc: ConfigError, also: tuple[str, ...] = ()) -> ConfigError:
    """A configuration's scenario error, naming the plan file and the searched key behind it:
    the key itself, one above or below it, else one sharing its section (``cluster.
    disaggregation.prefill_replicas`` for an error in ``cluster.disaggregation.kv_transfer``);
    failing those, the same for each of the keys ``also`` in turn (the engine settings behind an
    error the engine files under a cluster key); the error unchanged when no searched key is involved."""
    def closeness(k: str, target: str) -> tuple:
        if target == k or target.startswith(k + "."):
            return (3, len(k))
        if k.startswith(target + "."):
            return (2, len(k))
        shared = 0
        for a, b in zip(k.split("."), target.split(".")):
            if a != b:
                break
            shared += 1
        return (1 if shared >= 2 else 0, shared)

    for target in (exc.key, *also):
        key = max(values, key=lambda k: closeness(k, target), default=None)
        if key is not None and closeness(key, target)[0] > 0:
            where = "" if exc.key == key else f"{exc.key}: "
            return ConfigError(path, f"space.{key}", f"value {json.dumps(values[key])}: {where}{exc.message}")
    return exc

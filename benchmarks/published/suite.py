"""The published-results suite: load cases, validate them, run their scenarios, compute metrics.

A case (``cases/<id>.yaml``) holds one number a real serving engine was measured at, where
it was published, and a kvsim scenario of the same setup. ``run.py`` is the command line;
README.md explains the families, the metrics and how to add a case.

Everything goes through the project's public API: ``sim.config.scenario.parse_scenario``
(the same validation as ``sim run``), ``sim.engine.simulation.Simulation``,
``sim.engine.logs.metrics.summarize`` and, for memory plans, ``sim.engine.parts.build_plan``.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sim.errors import ConfigError, read_yaml_file
from offload_gain import GAIN_METRICS, simulate_gain  # (benchmarks/published/ is on sys.path, as for suite)

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"

FAMILIES = ("step_latency", "saturated_throughput", "latency_under_load", "memory_plan", "offload_gain")
PROFILES = ("eager", "vllm-v1", "vllm-v0", "sglang", "sglang-0.4", "trtllm", "trtllm-pytorch", "compiled", "lmdeploy")  # sim/cost/profile.py
#: How the source's harness drove the engine (sim/cost/profile.py Entrypoint): an HTTP server streaming
#: to a benchmark client, or the engine's own API in process (trtllm-bench, LLM.generate, sgl.Engine)
ENTRYPOINTS = ("api-server", "offline", "chat")
#: Capabilities a case needs beyond one replica (issue #15 after tensor parallelism): such cases are
#: listed, not run, unless the simulator has the capability (MET_BY).
#: no_gpu_p2p: tensor-parallel GPUs without peer-to-peer access (vLLM logs "Custom allreduce is
#: disabled because your platform lacks GPU P2P capability"): NCCL stages the all-reduces through
#: host memory (issue #41), which the scenario key ``engine.gpu_p2p: false`` models (sim/calib/host_staged.py).
REQUIRES = ("pipeline_parallel", "replicas", "disaggregation", "no_gpu_p2p")
#: A requirement the simulator meets where its engine schema has the key: (key, the value the runner sets)
MET_BY = {"no_gpu_p2p": ("gpu_p2p", False)}

#: Optional engine keys a case states at its top level; the runner copies them into scenario.engine
#: where the schema has them (scenario_dict), so the same cases run on trees before and after a key
ENGINE_KEYS = ("compute_dtype", "embedding_dtype", "attention_data_parallel", "entrypoint",
               "kv_cache_free_gpu_mem_fraction")
TOP_KEYS = {"id", "family", "engine", "engine_version", "profile", "citation", "published",
            "scenario", "notes", "requires", *ENGINE_KEYS}
REQUIRED_KEYS = ("id", "family", "engine", "engine_version", "profile", "citation",
                 "published", "scenario", "notes")
CITATION_KEYS = ("url", "where", "quote", "setup")
PUBLISHED_KEYS = ("metric", "value", "unit")


# ----------------------------------------------------------------------------- metrics


def _ms(x: float | None) -> float | None:
    return None if x is None else 1000.0 * x


def _inv(x: float | None) -> float | None:
    return None if not x else 1.0 / x


#: metric -> (what it needs: "run" or "plan", function of the summary dict or of the plan)
METRICS: dict[str, tuple[str, Callable[..., float | None]]] = {
    "decode_tokens_per_s_per_seq": ("run", lambda s: _inv(s["tpot_s"]["mean"])),
    "tpot_ms_mean": ("run", lambda s: _ms(s["tpot_s"]["mean"])),
    "tpot_ms_p50": ("run", lambda s: _ms(s["tpot_s"]["p50"])),
    "ttft_ms_mean": ("run", lambda s: _ms(s["ttft_s"]["mean"])),
    "ttft_ms_p50": ("run", lambda s: _ms(s["ttft_s"]["p50"])),
    "e2e_ms_p50": ("run", lambda s: _ms(s["e2e_s"]["p50"])),
    "e2e_ms_mean": ("run", lambda s: _ms(s["e2e_s"]["mean"])),
    "e2e_s_mean": ("run", lambda s: s["e2e_s"]["mean"]),
    "output_tokens_per_s": ("run", lambda s: s["throughput"]["output_tokens_per_s"]),
    "output_tokens_per_s_per_gpu": ("run", lambda s: s["throughput"]["output_tokens_per_s"] / s["engine"]["gpus"]),
    "total_tokens_per_s": ("run", lambda s: s["throughput"]["total_tokens_per_s"]),
    "requests_per_s": ("run", lambda s: s["throughput"]["requests_per_s"]),
    "kv_cache_tokens": ("plan", lambda plan, sc: plan.num_gpu_blocks * plan.block_size),
    "max_concurrency": ("plan", lambda plan, sc: plan.num_gpu_blocks * plan.block_size
                        / sc.engine.max_model_len),
    "kv_cache_gib": ("plan", lambda plan, sc: plan.kv_pool_bytes / (1 << 30)),
    **GAIN_METRICS,  # "gain": the run with kv.offload against the same without it (offload_gain.py)
}


# ------------------------------------------------------------------------------- cases


@dataclass
class Case:
    id: str
    family: str
    engine: str
    engine_version: str
    profile: str
    citation: dict
    published: dict
    scenario: dict
    notes: str
    path: Path
    requires: list[str] = field(default_factory=list)
    compute_dtype: str | None = None
    embedding_dtype: str | None = None  # the engine's lm_head / embedding dtype when not the default
    attention_data_parallel: bool | None = None  # the GPUs ran attention data-parallel (DEP)
    entrypoint: str | None = None  # api-server, offline or chat (None: the scenario's default, api-server)
    kv_cache_free_gpu_mem_fraction: float | None = None  # TensorRT-LLM's KV sizing (sim/model/memory.py)

    @property
    def runnable(self) -> bool:
        return all(r in MET_BY and MET_BY[r][0] in engine_fields() for r in self.requires)

    @property
    def metric(self) -> str:
        return self.published["metric"]

    @property
    def value(self) -> float:
        return float(self.published["value"])


def _need(cond: bool, path: Path, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(str(path), key, msg)


def _nonempty_str(data: dict, key: str, path: Path, prefix: str = "") -> None:
    v = data.get(key)
    _need(isinstance(v, str) and v.strip() != "", path, prefix + key, "must be a non-empty string")


def load_case(path: str | Path) -> Case:
    """Read and validate one case file (ConfigError naming the file and key on a bad case)."""
    path = Path(path)
    data = read_yaml_file(path)
    _need(isinstance(data, dict), path, "<top>", "a case must be a YAML mapping")
    unknown = sorted(set(data) - TOP_KEYS)
    _need(not unknown, path, unknown[0] if unknown else "", f"unknown key; allowed: {', '.join(sorted(TOP_KEYS))}")
    for key in REQUIRED_KEYS:
        _need(key in data, path, key, "required key is missing")
    for key in ("id", "engine", "engine_version", "notes"):
        _nonempty_str(data, key, path)
    _need(data["id"] == path.stem, path, "id", f"must equal the file name '{path.stem}'")
    _need(data["family"] in FAMILIES, path, "family", f"got {data['family']!r}; allowed: {', '.join(FAMILIES)}")
    _need(data["profile"] in PROFILES, path, "profile", f"got {data['profile']!r}; allowed: {', '.join(PROFILES)}")
    cit = data["citation"]
    _need(isinstance(cit, dict), path, "citation", "must be a mapping with url, where, quote, setup")
    for key in CITATION_KEYS:
        _nonempty_str(cit, key, path, "citation.")
    _need(cit["url"].startswith(("https://", "http://")), path, "citation.url", "must be an http(s) URL")
    pub = data["published"]
    _need(isinstance(pub, dict), path, "published", "must be a mapping with metric, value, unit")
    for key in PUBLISHED_KEYS:
        _need(key in pub, path, f"published.{key}", "required key is missing")
    _need(pub["metric"] in METRICS, path, "published.metric",
          f"got {pub['metric']!r}; allowed: {', '.join(METRICS)}")
    val = pub["value"]
    _need(isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val) and val > 0,
          path, "published.value", f"must be a positive number, got {val!r}")
    _nonempty_str(pub, "unit", path, "published.")
    _need(isinstance(data["scenario"], dict), path, "scenario", "must be a mapping (a kvsim scenario)")
    _need("profile" not in (data["scenario"].get("engine") or {}), path, "scenario.engine.profile",
          "put the profile at the top level of the case (the runner injects it when supported)")
    req = data.get("requires") or []
    if isinstance(req, str):
        req = [req]
    _need(isinstance(req, list) and all(r in REQUIRES for r in req), path, "requires",
          f"allowed: {', '.join(REQUIRES)}")
    cd = data.get("compute_dtype")
    _need(cd is None or isinstance(cd, str), path, "compute_dtype", "must be a dtype name")
    ed = data.get("embedding_dtype")
    _need(ed is None or isinstance(ed, str), path, "embedding_dtype", "must be a dtype name")
    adp = data.get("attention_data_parallel")
    _need(adp is None or isinstance(adp, bool), path, "attention_data_parallel", "must be true or false")
    ep = data.get("entrypoint")
    _need(ep is None or ep in ENTRYPOINTS, path, "entrypoint", f"allowed: {', '.join(ENTRYPOINTS)}")
    kvf = data.get("kv_cache_free_gpu_mem_fraction")
    _need(kvf is None or (isinstance(kvf, float) and 0 < kvf <= 1), path, "kv_cache_free_gpu_mem_fraction",
          "must be a number in (0, 1]")
    return Case(id=data["id"], family=data["family"], engine=data["engine"],
                engine_version=str(data["engine_version"]), profile=data["profile"],
                citation=cit, published=pub, scenario=data["scenario"], notes=data["notes"],
                path=path, requires=list(req), compute_dtype=cd, embedding_dtype=ed,
                attention_data_parallel=adp, entrypoint=ep, kv_cache_free_gpu_mem_fraction=kvf)


def load_cases(cases_dir: str | Path = CASES_DIR, only: list[str] | None = None) -> list[Case]:
    files = sorted(Path(cases_dir).glob("*.yaml"))
    if not files:
        raise ConfigError(str(cases_dir), "<cases>", "no case files (*.yaml) found")
    cases = [load_case(f) for f in files]
    if only:
        known = {c.id for c in cases}
        missing = [o for o in only if o not in known]
        if missing:
            raise ConfigError(str(cases_dir), "--only", f"no case named {missing[0]!r}")
        cases = [c for c in cases if c.id in only]
    return cases


@functools.cache
def engine_fields() -> frozenset[str]:
    from sim.config.schema import EngineConfig

    return frozenset(EngineConfig.model_fields)


def scenario_dict(case: Case) -> dict:
    """The case's scenario mapping with name, and profile and the optional engine keys when supported."""
    data = copy.deepcopy(case.scenario)
    data.setdefault("name", case.id)
    fields = engine_fields()
    eng = data.setdefault("engine", {})
    if "profile" in fields:
        eng.setdefault("profile", case.profile)
    for key in ENGINE_KEYS:
        if getattr(case, key) is not None and key in fields:
            eng.setdefault(key, getattr(case, key))
    for req in case.requires:  # a requirement the schema meets (MET_BY): its key set
        if req in MET_BY and MET_BY[req][0] in fields:
            eng.setdefault(*MET_BY[req])
    return data


def build_scenario(case: Case):
    """The validated Scenario, through the project's own loader (ConfigError on a bad one)."""
    from sim.config.scenario import parse_scenario

    return parse_scenario(scenario_dict(case), str(case.path))


# ------------------------------------------------------------------------------ running


@dataclass
class Outcome:
    case: Case
    simulated: float | None = None
    error: str | None = None
    wall_s: float = 0.0
    status: str = "ok"  # ok | not_runnable | failed

    @property
    def signed_error(self) -> float | None:
        if self.simulated is None:
            return None
        return self.simulated / self.case.value - 1.0


def simulate_metric(case: Case) -> float:
    """Run one case's scenario (no files written) and compute its metric."""
    sc = build_scenario(case)
    kind, fn = METRICS[case.metric]
    if kind == "plan":
        from sim.engine.parts import build_plan

        _, _, plan = build_plan(sc)
        value = fn(plan, sc)
    elif kind == "gain":
        value = simulate_gain(scenario_dict(case), str(case.path), fn)
    else:
        from sim.engine.logs.metrics import summarize
        from sim.engine.simulation import Simulation

        summary = summarize(Simulation(sc).run())
        value = fn(summary)
    if value is None or not math.isfinite(value):
        raise ValueError(f"metric {case.metric} is undefined for this run")
    return float(value)


def run_case(case: Case) -> Outcome:
    if not case.runnable:
        return Outcome(case, status="not_runnable", error="requires " + ", ".join(case.requires))
    t0 = time.perf_counter()
    try:
        value = simulate_metric(case)
    except ConfigError:
        raise
    except Exception as exc:  # a crash in one case must not hide the others' results
        return Outcome(case, status="failed", error=f"{type(exc).__name__}: {exc}",
                       wall_s=time.perf_counter() - t0)
    return Outcome(case, simulated=value, wall_s=time.perf_counter() - t0)


def family_stats(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    rows = []
    for fam in FAMILIES:
        errs = [o.signed_error for o in outcomes if o.case.family == fam and o.signed_error is not None]
        if not errs:
            rows.append({"family": fam, "count": 0, "mape": None, "mean_signed_error": None})
            continue
        rows.append({"family": fam, "count": len(errs),
                     "mape": sum(abs(e) for e in errs) / len(errs),
                     "mean_signed_error": sum(errs) / len(errs)})
    errs = [o.signed_error for o in outcomes if o.signed_error is not None]
    rows.append({"family": "all", "count": len(errs),
                 "mape": sum(abs(e) for e in errs) / len(errs) if errs else None,
                 "mean_signed_error": sum(errs) / len(errs) if errs else None})
    return rows


def source_stats(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """Per family and per source (the citation's URL: one page, log or table), its cases'
    MAPE and mean signed error, each family's rows followed by the mean of its sources' MAPEs:
    every source weighs the same, however many rows it publishes (a vendor table of hundreds of
    rows does not outvote a blog post of one); last, the same over all families (a source's
    cases of every family together)."""
    by: dict[tuple[str, str], list[float]] = {}
    for o in outcomes:
        if o.signed_error is not None:
            by.setdefault((o.case.family, o.case.citation["url"]), []).append(o.signed_error)
            by.setdefault(("all", o.case.citation["url"]), []).append(o.signed_error)
    rows: list[dict[str, Any]] = []
    for fam in (*FAMILIES, "all"):
        mine = [(url, errs) for (f, url), errs in sorted(by.items()) if f == fam]
        if not mine:
            continue
        if fam != "all":
            rows += [{"family": fam, "source": url, "count": len(errs), "mape": sum(abs(e) for e in errs) / len(errs),
                      "mean_signed_error": sum(errs) / len(errs)} for url, errs in mine]
        mapes = [sum(abs(e) for e in errs) / len(errs) for _, errs in mine]
        rows.append({"family": fam, "source": "(mean over sources)", "count": len(mine),
                     "mape": sum(mapes) / len(mapes), "mean_signed_error": None})
    return rows

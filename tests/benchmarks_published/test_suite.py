"""The published-results suite (benchmarks/published): every case is well-formed and loads
through the real scenario loader, and the runner runs cases end to end."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUITE_DIR = REPO / "benchmarks" / "published"


def _load(name: str, file: str):
    if str(SUITE_DIR) not in sys.path:
        sys.path.insert(0, str(SUITE_DIR))
    loaded = sys.modules.get(name)  # another test module loaded it: one module object, or pickling
    if loaded is not None and Path(getattr(loaded, "__file__", "")) == SUITE_DIR / file:  # run_case by name fails
        return loaded
    spec = importlib.util.spec_from_file_location(name, SUITE_DIR / file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


suite = _load("suite", "suite.py")  # the name run.py imports it by
runner = _load("published_run", "run.py")

CASES = suite.load_cases()
STEP_CASE = "gptfast-llama2-7b-a100-base-bs1"
MEMORY_CASE = "vllm-llama2-7b-a100-80gb-gpu-blocks"


def test_enough_runnable_cases_per_family():
    runnable = [c for c in CASES if c.runnable]
    assert len(runnable) >= 24
    need = {"step_latency": 7, "saturated_throughput": 7, "latency_under_load": 5, "memory_plan": 4}
    for fam, least in need.items():
        assert sum(c.family == fam for c in runnable) >= least, fam
    # listed-not-run cases stay a small share (the 44 TP 2 no_gpu_p2p cases run since engine.gpu_p2p)
    assert sum(not c.runnable for c in CASES) <= 0.05 * len(CASES)
    assert len({c.id for c in CASES}) == len(CASES)


def test_no_gpu_p2p_cases_are_tensor_parallel_and_run_without_p2p():
    """`requires: [no_gpu_p2p]` names the all-reduce path, so only a case with several GPUs may carry it;
    the schema's engine.gpu_p2p meets it: the case runs, its scenario with gpu_p2p false."""
    p2p = [c for c in CASES if "no_gpu_p2p" in c.requires]
    assert p2p
    assert all(c.scenario["engine"].get("tensor_parallel_size", 1) > 1 for c in p2p)
    assert all(c.runnable for c in p2p)
    sc = suite.build_scenario(p2p[0])
    assert sc.engine.gpu_p2p is False and sc.engine.tensor_parallel_size == 2
    others = [c for c in CASES if c.runnable and not c.requires and c.scenario["engine"].get("tensor_parallel_size", 1) > 1]
    assert suite.build_scenario(others[0]).engine.gpu_p2p is True
    # a requirement the schema does not meet stays listed, not run
    assert not [c for c in CASES if "pipeline_parallel" in c.requires and c.runnable]


def test_the_suites_profile_list_is_the_simulators():
    from sim.cost.profile import PROFILES

    assert set(suite.PROFILES) == set(PROFILES)


def test_tensorrt_llm_cases_model_the_backend_their_source_ran():
    """The PyTorch backend's Python executor (trtllm-pytorch) for the runs its source says used it, the
    TensorRT engine's C++ executor (trtllm) for the others."""
    trt = [c for c in CASES if c.profile in ("trtllm", "trtllm-pytorch")]
    pytorch = [c for c in trt if "pytorch backend" in c.engine_version.lower()]
    assert len(pytorch) >= 140
    assert all(c.profile == "trtllm-pytorch" for c in pytorch)
    assert all(c.profile == "trtllm" for c in trt if c not in pytorch)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_validates_and_loads_as_a_scenario(case):
    assert case.citation["url"].startswith("https://")
    for key in ("quote", "where", "setup"):
        assert case.citation[key].strip()
    assert case.value > 0 and math.isfinite(case.value)
    assert case.metric in suite.METRICS
    sc = suite.build_scenario(case)  # the project's own loader: ConfigError on a bad scenario
    assert sc.name == case.id
    assert "profile" not in case.scenario.get("engine", {})


def test_runner_runs_a_step_latency_and_a_memory_plan_case(tmp_path, capsys):
    out = tmp_path / "r.json"
    md = tmp_path / "r.md"
    rc = runner.main(["--only", STEP_CASE, MEMORY_CASE, "--json", str(out), "--markdown", str(md), "--quiet"])
    assert rc == 0
    doc = json.loads(out.read_text())
    got = {c["id"]: c for c in doc["cases"]}
    assert set(got) == {STEP_CASE, MEMORY_CASE}
    for c in got.values():
        assert c["status"] == "ok"
        assert c["simulated"] is not None and math.isfinite(c["simulated"]) and c["simulated"] > 0
        assert math.isclose(c["signed_error"], c["simulated"] / c["published"] - 1)
    assert got[STEP_CASE]["family"] == "step_latency"
    assert got[MEMORY_CASE]["family"] == "memory_plan"
    text = md.read_text()
    assert STEP_CASE in text and "MAPE" in text
    assert STEP_CASE in capsys.readouterr().out


def test_not_runnable_cases_are_listed_not_run(tmp_path: Path):
    import yaml

    data = yaml.safe_load(next(c for c in CASES if c.id == MEMORY_CASE).path.read_text())
    data["id"], data["requires"] = "needs-pipeline-parallel", ["pipeline_parallel"]
    path = tmp_path / "needs-pipeline-parallel.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    case = suite.load_case(path)
    assert not case.runnable
    o = suite.run_case(case)
    assert o.status == "not_runnable" and o.simulated is None and "pipeline_parallel" in o.error


def _write_bad(tmp_path: Path, mutate) -> Path:
    import yaml

    src = next(c for c in CASES if c.id == MEMORY_CASE).path
    data = yaml.safe_load(src.read_text())
    mutate(data)
    d = tmp_path / "cases"
    d.mkdir()
    (d / f"{data['id']}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return d


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d["citation"].update(quote=""), "citation.quote"),
    (lambda d: d["citation"].pop("url"), "citation.url"),
    (lambda d: d.update(family="vibes"), "family"),
    (lambda d: d["published"].update(metric="speed"), "published.metric"),
    (lambda d: d["published"].update(value=-1), "published.value"),
    (lambda d: d.update(surprise=1), "surprise"),
    (lambda d: d["scenario"]["engine"].update(max_model_len=-5), "engine.max_model_len"),
])
def test_a_bad_case_is_one_error_line_and_exit_2(tmp_path, capsys, mutate, key):
    cases = _write_bad(tmp_path, mutate)
    assert runner.main(["--cases", str(cases), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "cases/" in err[0] and key in err[0]


def test_memory_metrics_agree_with_the_plan():
    """kv_cache_gib is the plan's pool in bytes; kv_cache_tokens its blocks x block size: the
    tokens' bytes never exceed the pool (whole blocks only), and miss it by under one block."""
    from sim.engine.parts import build_plan

    case = next(c for c in CASES if c.metric == "kv_cache_gib")
    sc = suite.build_scenario(case)
    _, _, plan = build_plan(sc)
    gib = suite.METRICS["kv_cache_gib"][1](plan, sc)
    tokens = suite.METRICS["kv_cache_tokens"][1](plan, sc)
    assert gib == plan.kv_pool_bytes / (1 << 30)
    used = tokens / plan.block_size * plan.bytes_per_block
    assert 0 <= plan.kv_pool_bytes - used < plan.bytes_per_block


def test_jobs_give_the_same_results_and_sources_weigh_the_same(tmp_path):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    ids = [STEP_CASE, MEMORY_CASE, "vllm0251-qwen2.5-7b-rtx4090-sharegpt-bs1-decode"]
    assert runner.main(["--only", *ids, "--json", str(one), "--quiet"]) == 0
    assert runner.main(["--only", *ids, "--json", str(two), "--quiet", "--jobs", "2"]) == 0
    a, b = (json.loads(p.read_text()) for p in (one, two))
    strip = lambda doc: [{k: v for k, v in c.items() if k != "wall_s"} for c in doc["cases"]]  # noqa: E731
    assert strip(a) == strip(b)  # same values, same order
    rows = {(r["family"], r["source"]): r for r in a["sources"]}
    step = [r for (fam, src), r in rows.items() if fam == "step_latency" and not src.startswith("(")]
    assert len(step) == 2 and all(r["count"] == 1 for r in step)  # two sources, one case each
    mean = rows[("step_latency", "(mean over sources)")]
    assert math.isclose(mean["mape"], sum(r["mape"] for r in step) / 2)
    assert runner.main(["--only", STEP_CASE, "--jobs", "0", "--quiet"]) == 2

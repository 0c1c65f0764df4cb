"""A cluster run's report.html in a real headless Chromium (as tests/report/ does for one
engine): no errors, every plot drawn, one line per replica in the replicas figure and one
row per replica in the table; for a plain cluster and for replicas of a pipeline-parallel
engine. Skips without Chromium, except under CI (CI=true)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import yaml

from cluster_world import CLUSTER
from sim.cli.main import main

REPORT_TESTS = Path(__file__).resolve().parents[2] / "report"

#: Llama-3-70B, tp 2 x pp 2 a replica (vLLM V1's batch queue), 3 replicas, prefix-aware, multi-turn.
PP_FLEET = {
    "name": "pp-fleet-report", "seed": 4, "model": "llama-3-70b", "gpu": "h100-sxm",
    "engine": {"max_model_len": 4096, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
    "kv": {"prefix_caching": True},
    "cluster": {"num_replicas": 3, "router": "prefix-aware"},
    "workload": {"num_requests": 40, "arrival": {"type": "poisson", "rate": 10.0},
                 "prompt_tokens": {"type": "lognormal", "median": 300, "sigma": 0.6, "max": 1500},
                 "output_tokens": {"type": "lognormal", "median": 40, "sigma": 0.5, "max": 200},
                 "shared_prefix": {"num_prefixes": 4, "prefix_tokens": 128},
                 "conversation": {"turns": {"type": "uniform", "low": 1, "high": 3}, "think_time_s": 1.0}},
}

SCENARIOS = {"cluster": CLUSTER, "pp-fleet": PP_FLEET}


def _browser_class():
    spec = importlib.util.spec_from_file_location("kvsim_cdp_for_cluster", REPORT_TESTS / "cdp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Browser


def _chromium() -> str | None:
    for exe in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.path.exists(exe):
            return exe
    return None


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def page(request, tmp_path_factory):
    exe = _chromium()
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but chromium is not installed")
        pytest.skip("chromium not installed")
    tmp = tmp_path_factory.mktemp(f"{request.param}-report")
    (tmp / "s.yaml").write_text(yaml.safe_dump(SCENARIOS[request.param]))
    out = tmp / "out"
    assert main(["run", str(tmp / "s.yaml"), "--out", str(out), "--quiet"]) == 0
    with _browser_class()(exe) as browser:
        yield browser.open((out / "report.html").as_uri()), json.loads((out / "summary.json").read_text())


def test_cluster_report_draws_every_plot_and_the_replicas(page):
    p, summary = page
    if "parallel" in summary:  # the pipeline-parallel replicas: 3 x tp 2 x pp 2
        assert summary["parallel"]["gpus"] == 12 and len(summary["replicas"]) == 3
    assert p.errors() == []
    plots = p.eval("""Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
        title: gd.layout.title.text, names: gd.data.map(t => t.name),
        drawn: gd.querySelectorAll('.main-svg').length,
        points: gd.calcdata.reduce((n, cd) => n + cd.length, 0)}))""")
    assert [x["title"].split(" (")[0].split(":")[0] for x in plots] == ["Replicas", "Latency CDFs", "Request timeline"]
    for x in plots:
        assert x["drawn"] >= 2 and x["points"] > 0, x
    assert sorted(set(plots[0]["names"])) == ["replica 0", "replica 1", "replica 2"]
    rows = p.eval("Array.from(document.querySelectorAll('table.replicas tr')).map(r => r.innerText)")
    assert len(rows) == 1 + summary["cluster"]["num_replicas"]
    for row, entry in zip(rows[1:], summary["replicas"]):
        assert row.split("\t")[:2] == [str(entry["replica"]), str(entry["requests"]["arrived"])]

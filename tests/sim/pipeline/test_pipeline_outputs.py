"""A pipeline-parallel run in vLLM V0's form: its report.html and terminal table name its virtual engines as such
(not "replicas"), and its summary's cluster block names the router it really has."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.cli.main import main

SCENARIO = {
    "name": "pp-out", "seed": 5, "model": "llama-3-70b", "gpu": "h100-sxm",
    "engine": {"profile": "eager", "max_model_len": 4096, "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
               "pipeline_mode": "virtual-engines"},
    "workload": {"num_requests": 30, "arrival": {"type": "poisson", "rate": 4.0},
                 "prompt_tokens": {"type": "fixed", "value": 400},
                 "output_tokens": {"type": "fixed", "value": 30}},
}


@pytest.fixture(scope="module")
def pp_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pp")
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return tmp, path


def test_terminal_table_lists_virtual_engines_and_the_stages(pp_run, capsys) -> None:
    tmp, path = pp_run
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(tmp / "t"), "--no-report"]) == 0
    lines = capsys.readouterr().out.splitlines()
    engines = [ln for ln in lines if ln.startswith("virtual engine ")]
    assert [ln.split(":")[0] for ln in engines] == ["virtual engine 0 (stage pipeline)",
                                                    "virtual engine 1 (stage pipeline)"]
    assert sum(int(ln.split("arrived ")[1].split(",")[0]) for ln in engines) == 30
    assert not [ln for ln in lines if ln.startswith(("replica ", "cluster "))]
    head = next(ln for ln in lines if ln.startswith("pipeline "))
    assert "2 virtual engines" in head and "2 stages of 2 GPU(s)" in head and "stage 1: 40 layers" in head


def test_report_calls_them_virtual_engines_and_the_summary_names_its_router(pp_run) -> None:
    tmp, path = pp_run
    assert main(["run", str(path), "--out", str(tmp / "r"), "--quiet"]) == 0
    html = (tmp / "r" / "report.html").read_text()
    assert "section-error" not in html and "<h2>Replicas</h2>" not in html
    section = html[html.index("<h2>Virtual engines</h2>"):].split("</table>")[0]
    assert "<th>virtual engine (stage pipeline)</th>" in section and section.count("<tr>") == 3
    assert "virtual engine 1 (stage pipeline)" in html  # the per-engine figure's legend
    assert "peak KV use of a virtual engine" in html
    s = json.loads((tmp / "r" / "summary.json").read_text())
    c = s["cluster"]
    assert (c["num_replicas"], c["router"], c["sticky_sessions"]) == (1, "least-outstanding", False)
    assert len(s["replicas"]) == s["parallel"]["virtual_engines"] == 2

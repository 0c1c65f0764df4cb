"""--plotly inline|cdn|folder: where report.html, whatif.html, compare.html and plan.html get
plotly.js from. Inline (the default) is the self-contained page; cdn a small page that loads
the same release from cdn.plot.ly; folder one plotly.min.js beside the pages."""

from __future__ import annotations

import re

import yaml
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from sim.cli.main import main

SCENARIO = {
    "name": "plotly", "model": "tiny-llama", "gpu": "a100-80gb",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 64},
    "kv": {"allocator": "paged", "block_size": 16},
    "workload": {"num_requests": 6, "arrival": {"type": "constant", "rate": 10.0},
                 "prompt_tokens": {"type": "fixed", "value": 20},
                 "output_tokens": {"type": "fixed", "value": 5}},
}
SRC = re.compile(r'<script[^>]*src="([^"]+)"')


def _scenario(tmp_path) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return str(path)


def _sources(page) -> list[str]:
    return SRC.findall(page.read_text())


def test_run_reports_in_each_mode(tmp_path):
    s, js = _scenario(tmp_path), get_plotlyjs()
    for mode in ("inline", "cdn", "folder"):
        assert main(["run", s, "--out", str(tmp_path / mode), "--plotly", mode, "--quiet"]) == 0
    inline, cdn, folder = (tmp_path / m / "report.html" for m in ("inline", "cdn", "folder"))
    assert js in inline.read_text() and _sources(inline) == []
    assert js not in cdn.read_text() and _sources(cdn) == [f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"]
    assert js not in folder.read_text() and _sources(folder) == ["plotly.min.js"]
    assert (tmp_path / "folder" / "plotly.min.js").read_text() == js
    assert len(cdn.read_text()) < len(inline.read_text()) - len(js) + 10_000
    assert not (tmp_path / "inline" / "plotly.min.js").exists() and not (tmp_path / "cdn" / "plotly.min.js").exists()
    # the folder's copy is the run's file: --force without --plotly folder removes it
    assert main(["run", s, "--out", str(tmp_path / "folder"), "--force", "--quiet"]) == 0
    assert not (tmp_path / "folder" / "plotly.min.js").exists() and js in folder.read_text()


def test_sweep_compare_and_plan_pages(tmp_path):
    s, js = _scenario(tmp_path), get_plotlyjs()
    out = tmp_path / "sweep"
    assert main(["sweep", s, "--grid", "scheduler.max_num_seqs=2,4", "--out", str(out), "--workers", "1",
                 "--plotly", "folder", "--quiet"]) == 0
    assert _sources(out / "whatif.html") == ["plotly.min.js"] and (out / "plotly.min.js").read_text() == js
    assert main(["run", s, "--out", str(tmp_path / "a"), "--quiet", "--no-report"]) == 0
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "c.html"),
                 "--plotly", "cdn", "--quiet"]) == 0
    assert _sources(tmp_path / "c.html")[0].startswith("https://cdn.plot.ly/")
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "base": {**SCENARIO, "workload": {**SCENARIO["workload"], "arrival": {"type": "poisson", "rate": 1}}},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.1, "percentile": 90, "attainment": 0.9}, "target_rate": 5,
        "space": {"scheduler.max_num_seqs": [4]},
        "search": {"min_rate": 1, "max_rate": 4, "tolerance": 0.5, "num_requests": 20, "min_duration_s": 0,
                   "confirm_duration_s": 0}}))
    assert main(["plan", str(plan), "--out", str(tmp_path / "plan"), "--workers", "1", "--plotly", "folder",
                 "--quiet"]) == 0
    assert _sources(tmp_path / "plan" / "plan.html") == ["plotly.min.js"]
    assert (tmp_path / "plan" / "plotly.min.js").read_text() == js
    # as with sim run: --force without --plotly folder removes the earlier plan's copy
    assert main(["plan", str(plan), "--out", str(tmp_path / "plan"), "--workers", "1", "--force", "--quiet"]) == 0
    assert not (tmp_path / "plan" / "plotly.min.js").exists() and js in (tmp_path / "plan" / "plan.html").read_text()


def test_a_bad_mode_is_one_line(tmp_path, capsys):
    assert main(["run", _scenario(tmp_path), "--plotly", "web"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plotly" in err and "inline" in err

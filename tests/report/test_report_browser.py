"""report.html in a real headless Chromium: no errors, every plot drawn, the toggle works.

Plotly.py ships numpy arrays base64-encoded; the decoded values are in ``gd._fullData``
and the drawn points in ``gd.calcdata`` (one array of points per trace).
"""

from __future__ import annotations

import json

import pytest

from sim.cli.main import main

PLOTS = ("KV cache memory over time", "Engine load", "Preemption and swap events",
         "Latency CDFs", "Request timeline")


@pytest.fixture(scope="module")
def report_page(browser, tiny_scenario, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    assert main(["run", str(tiny_scenario), "--out", str(out), "--quiet"]) == 0
    html = (out / "report.html").read_text()
    return browser.open((out / "report.html").as_uri()), html, json.loads((out / "summary.json").read_text())


def test_report_is_self_contained_with_plotly_inlined_once(report_page):
    _, html, _ = report_page
    assert html.count("Plotly.newPlot") == len(PLOTS)
    assert html.count("plotly.js v") == 1  # the library's banner: inlined exactly once
    assert "<script src=" not in html  # nothing fetched: opens offline


def test_report_opens_without_errors_and_draws_every_plot(report_page):
    page, _, _ = report_page
    assert page.errors() == []
    plots = page.eval("""Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
        title: gd.layout.title.text, traces: gd.data.length,
        drawn: gd.querySelectorAll('.main-svg').length,
        points: gd.calcdata.reduce((n, cd) => n + cd.length, 0)}))""")
    assert [p["title"].split(" (")[0] for p in plots] == [t.split(" (")[0] for t in PLOTS]
    for p in plots:
        assert p["drawn"] >= 2 and p["traces"] >= 1 and p["points"] > 0, p


def test_report_shows_preemption_and_swap_events(report_page):
    page, _, summary = report_page
    assert summary["preemptions"]["swap"] > 0  # the tiny world is built to swap
    events = page.eval("""(() => { const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(g => g.layout.title.text.startsWith('Preemption'));
        return Object.fromEntries(gd._fullData.map(t => [t.name, Array.from(t.y).reduce((a, b) => a + b, 0)])); })()""")
    assert events["preempted in a step"] == summary["preemptions"]["recompute"] + summary["preemptions"]["swap"]
    assert events["swapped in a step (MiB)"] > 0


def test_report_shows_key_numbers_scenario_and_calibration(report_page):
    page, _, summary = report_page
    text = page.eval("document.body.innerText")
    assert f"{summary['requests']['completed']:,} / {summary['requests']['arrived']:,}" in text
    assert "requests completed / arrived" in text
    assert "Calibration" in text and "hbm_bandwidth_bytes_per_s" in text
    assert "Scenario (as run" in text and "tiny-llama" in text


def test_cdf_toggle_switches_between_log_and_linear_axes(report_page):
    page, _, _ = report_page
    find = "Array.from(document.querySelectorAll('.js-plotly-plot')).find(g => g.layout.title.text.startsWith('Latency'))"
    assert page.eval(f"{find}.layout.xaxis.type") == "log"
    page.eval(f"""(() => {{ const b = Array.from({find}.querySelectorAll('.updatemenu-button'))
        .find(e => e.textContent.includes('linear'));
        b.dispatchEvent(new MouseEvent('click', {{bubbles: true}})); }})()""")
    assert page.eval(f"new Promise(r => setTimeout(() => r([{find}.layout.xaxis.type, {find}.layout.xaxis3.type]), 200))") == ["linear", "linear"]
    assert page.errors() == []

"""compare.html in a real headless Chromium: no errors, every run overlaid in every plot."""

from __future__ import annotations

from sim.cli.main import main


def test_compare_page_overlays_runs(browser, tiny_scenario, tmp_path):
    dirs = []
    for preemption in ("recompute", "swap"):
        out = tmp_path / preemption
        assert main(["run", str(tiny_scenario), "--out", str(out), "--quiet", "--no-report",
                     "--set", f"scheduler.preemption={preemption}"]) == 0
        dirs.append(str(out))
    html = tmp_path / "compare.html"
    assert main(["compare", *dirs, "--out", str(html), "--quiet"]) == 0
    page = browser.open(html.as_uri())
    assert page.errors() == []
    plots = page.eval("""Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
        title: gd.layout.title.text, names: Array.from(new Set(gd.data.map(t => t.legendgroup || t.name))),
        drawn: gd.querySelectorAll('.main-svg').length}))""")
    assert [p["title"].split(" (")[0] for p in plots] == ["Key numbers", "Latency CDFs", "KV memory over time"]
    for p in plots:
        assert p["drawn"] >= 2 and p["names"] == ["recompute", "swap"], p

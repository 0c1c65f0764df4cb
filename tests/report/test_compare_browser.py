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
    # one run, one colour, in every panel, as drawn (plotly's resolved colours, not the spec)
    colors = page.eval("""(() => { const seen = {};
        for (const gd of document.querySelectorAll('.js-plotly-plot')) for (const t of gd._fullData) {
            const c = t.type === 'bar' ? t.marker.color : t.line.color;
            (seen[t.legendgroup] = seen[t.legendgroup] || []).push(c); }
        return Object.fromEntries(Object.entries(seen).map(([k, v]) => [k, Array.from(new Set(v))])); })()""")
    assert sorted(colors) == ["recompute", "swap"]
    assert all(len(c) == 1 for c in colors.values()) and colors["recompute"] != colors["swap"], colors

"""whatif.html in a real headless Chromium: no errors, charts drawn, the controls switch views."""

from __future__ import annotations

import csv

import pytest

MAIN = "document.getElementById('chart-main')"


@pytest.fixture(scope="module")
def whatif(browser, tiny_sweep):
    with (tiny_sweep / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    return browser.open((tiny_sweep / "whatif.html").as_uri()), rows


def choose(page, element_id: str, value: str) -> None:
    page.eval(f"""(() => {{ const s = document.getElementById('{element_id}'); s.value = {value!r};
        if (s.value !== {value!r}) throw new Error('no option ' + {value!r});
        s.dispatchEvent(new Event('change')); }})()""")


def shown(page) -> list[dict]:
    """The main chart's traces as drawn: name, type, x and y."""
    return page.eval(f"""{MAIN}._fullData.map(t => ({{name: t.name, type: t.type,
        x: Array.from(t.x), y: Array.from(t.y)}}))""")


def test_opens_without_errors_and_draws_both_charts(whatif):
    page, rows = whatif
    assert page.errors() == []
    assert page.eval(f"{MAIN}.querySelectorAll('.main-svg').length") >= 2
    assert page.eval("document.getElementById('chart-knee').querySelectorAll('.main-svg').length") >= 2
    assert "8 simulations" in page.eval("document.getElementById('lead').textContent")
    # The default view answers the first question of the list: latency against the request rate.
    assert page.eval("document.getElementById('xkey').value") == "workload.arrival.rate"
    assert page.eval("document.getElementById('color').value") == "kv.allocator"
    assert [t["name"] for t in shown(page)] == ["kv.allocator = contiguous-static", "kv.allocator = paged"]


def test_metric_dropdown_switches_the_plotted_metric(whatif):
    page, rows = whatif
    choose(page, "view", "0")
    before = shown(page)
    choose(page, "metric", "throughput.requests_per_s")
    after = shown(page)
    assert after != before
    assert page.eval(f"{MAIN}.layout.yaxis.title.text") == "throughput (requests/s)"
    # The drawn numbers are results.csv's, for the points in view (prefix caching fixed at false).
    expect = [float(r["throughput.requests_per_s"]) for r in rows
              if r["kv.allocator"] == "paged" and r["kv.prefix_caching"] == "false"]
    paged = next(t for t in after if t["name"].endswith("paged"))
    assert paged["x"] == [10, 40] and paged["y"] == pytest.approx(expect)
    assert page.errors() == []


def test_view_dropdown_shows_kv_waste_by_allocator(whatif):
    page, _ = whatif
    names = page.eval("Array.from(document.getElementById('view').options).map(o => o.textContent)")
    choose(page, "view", str(next(i - 1 for i, n in enumerate(names) if n.startswith("KV waste"))))
    assert page.eval("document.getElementById('xkey').value") == "kv.allocator"
    (bars,) = shown(page)
    assert bars["type"] == "bar" and bars["x"] == ["contiguous-static", "paged"]
    static, paged = bars["y"]
    assert static > 0.5 > 0.1 > paged  # pre-allocating max_model_len wastes most of it
    assert page.errors() == []


def test_slider_fixes_another_parameter(whatif):
    page, _ = whatif
    choose(page, "view", "")
    choose(page, "xkey", "kv.allocator")
    choose(page, "color", "")
    before = shown(page)
    page.eval("""(() => { const r = document.querySelector('#fixed input[type=range]');
        if (r.dataset.key !== 'workload.arrival.rate') throw new Error(r.dataset.key);
        r.value = 1; r.dispatchEvent(new Event('input')); })()""")
    assert shown(page) != before
    assert page.errors() == []


def test_failed_points_are_listed_with_their_error(whatif):
    page, _ = whatif
    table = page.eval("document.getElementById('points').innerText")
    assert table.count("invalid") == 2 and "prefix_caching needs allocator 'paged'" in table


def test_the_slo_is_drawn_on_latency_charts_only(whatif):
    page, rows = whatif
    choose(page, "view", "0")  # latency against the request rate: both charts drawn
    choose(page, "metric", "ttft_s.p99")
    shapes = page.eval(f"{MAIN}.layout.shapes")
    slo = float(rows[0]["slo.ttft_s"])
    assert len(shapes) == 1 and shapes[0]["y0"] == shapes[0]["y1"] == pytest.approx(slo)
    assert "SLO ttft_s" in page.eval(f"{MAIN}.layout.annotations[0].text")
    assert len(page.eval("document.getElementById('chart-knee').layout.shapes")) == 1
    choose(page, "metric", "tpot_s.p50")
    assert page.eval(f"{MAIN}.layout.shapes")[0]["y0"] == pytest.approx(float(rows[0]["slo.tpot_s"]))
    choose(page, "metric", "throughput.requests_per_s")
    assert page.eval(f"{MAIN}.layout.shapes") == []
    assert page.errors() == []

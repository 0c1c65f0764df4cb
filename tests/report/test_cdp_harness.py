"""The browser harness itself: it must see console errors and uncaught exceptions."""

from __future__ import annotations


def test_harness_reports_console_errors_and_exceptions(browser, tmp_path):
    page_file = tmp_path / "broken.html"
    page_file.write_text("<html><body><script>console.error('boom');</script>"
                         "<script>undefinedFunction();</script><p id='x'>ok</p></body></html>")
    page = browser.open(page_file.as_uri())
    errors = page.errors()
    assert any("boom" in e for e in errors)
    assert any("undefinedFunction" in e for e in errors)
    assert page.eval("document.getElementById('x').textContent") == "ok"

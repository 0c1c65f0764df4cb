"""Helpers of the integration tests (imported by them): the paths a user walks, through
the real command lines.

``run_cli`` runs a console script of this environment (``sim``, ``microbench``) in a fresh
process, from a folder of the test's own, as a user would; ``check_report`` is what any
report.html must be: one well-formed, self-contained page with every plot and no section
that failed to draw.
"""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REPORT_PLOTS = 5  # KV memory, engine load, events, latency CDFs, request timeline
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Balance(HTMLParser):
    """Checks that every element opened is closed, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'} at {self.getpos()}")
            if tag in self.stack:  # recover: drop what was left open inside it
                del self.stack[len(self.stack) - 1 - self.stack[::-1].index(tag):]
        else:
            self.stack.pop()


def well_formed(html: str) -> list[str]:
    """The nesting problems of ``html`` (empty: well-formed)."""
    parser = _Balance()
    parser.feed(html)
    parser.close()
    return parser.problems + [f"<{t}> never closed" for t in parser.stack]


def check_report(path: Path, calibration_name: str) -> str:
    """report.html at ``path``: well-formed, plotly inlined once, every plot, the calibration
    named, no section that failed to draw. Returns its text."""
    assert path.is_file(), f"{path} was not written"
    html = path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert well_formed(html) == []
    assert html.count("plotly.js v") == 1 and html.count("Plotly.newPlot") == REPORT_PLOTS
    assert "section-error" not in html and "could not be drawn" not in html
    assert "<summary>Calibration</summary>" in html
    assert f"<p>{calibration_name} (" in html  # the calibration section's heading line
    return html


def run_cli(tool: str, *args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``tool args`` in a fresh process; fails the test, with its output, if it exits non-zero."""
    proc = subprocess.run([str(BIN / tool), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))

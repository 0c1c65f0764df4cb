"""The fuzz suite prints how many cases it tried per input kind, and their outcomes."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter) -> None:
    from fuzzkit import COUNTS, OUTCOMES  # noqa: PLC0415

    if not COUNTS:
        return
    terminalreporter.write_sep("-", "bad-input fuzz: cases tried per input kind")
    for kind in sorted(COUNTS):
        terminalreporter.write_line(
            f"{kind}: {COUNTS[kind]} cases, {OUTCOMES[(kind, 'ok')]} ran (exit 0), "
            f"{OUTCOMES[(kind, 'error')]} refused with one error line (exit 2)")

"""Test modules have unique file names across tests/: the folders have no __init__.py, so
pytest imports each test module by its base name, and a second tests/**/test_cli.py stops
the whole run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_name_is_unique():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []

"""The frozen train/test split (benchmarks/published/split.py, split.yaml): every case has a side,
the test side is at least 30% and spans the families and sources, and assigning new cases never
moves an old one."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUITE_DIR = REPO / "benchmarks" / "published"


def _load(name: str):
    if str(SUITE_DIR) not in sys.path:
        sys.path.insert(0, str(SUITE_DIR))
    loaded = sys.modules.get(name)  # another test module loaded it: one module object, or pickling
    if loaded is not None and Path(getattr(loaded, "__file__", "")) == SUITE_DIR / f"{name}.py":  # run_case by name fails
        return loaded
    spec = importlib.util.spec_from_file_location(name, SUITE_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


suite = _load("suite")
split = _load("split")
CASES = suite.load_cases()


def test_every_case_has_a_side_and_no_stale_line() -> None:
    sides = split.read_split()
    ids = {c.id for c in CASES}
    assert set(sides) == ids, ("split.yaml is stale: run python benchmarks/published/split.py --assign; new "
                               f"{sorted(ids - set(sides))[:5]}, gone {sorted(set(sides) - ids)[:5]}")
    assert set(sides.values()) == {"train", "test"}


def test_test_side_is_at_least_30_percent_and_spans_families_and_sources() -> None:
    sides = split.read_split()
    n_test = sum(1 for s in sides.values() if s == "test")
    assert n_test >= 0.30 * len(sides)
    fam = Counter((c.family, sides[c.id]) for c in CASES)
    for f in {c.family for c in CASES}:
        assert fam[(f, "test")] > 0 and fam[(f, "train")] > 0, f
    by_source = Counter((c.citation["url"], sides[c.id]) for c in CASES)
    sizes = Counter(c.citation["url"] for c in CASES)
    for url, n in sizes.items():  # a source of two or more cases is on both sides
        if n >= 2:
            assert by_source[(url, "test")] and by_source[(url, "train")], url


def test_new_cases_do_not_move_old_ones() -> None:
    old = split.read_split()
    extra = [dataclasses.replace(CASES[0], id=f"zz-new-case-{i}") for i in range(20)]
    new, added, dropped = split.update(CASES + extra, old)
    assert added == sorted(c.id for c in extra) and dropped == []
    assert all(new[i] == s for i, s in old.items())
    assert {new[c.id] for c in extra} == {"train", "test"}  # the new stratum of 21 cases is split too
    fewer, _, dropped = split.update(CASES[1:], old)
    assert dropped == [CASES[0].id] and CASES[0].id not in fewer


def test_train_ids_is_the_train_side() -> None:
    sides = split.read_split()
    assert split.train_ids() == {i for i, s in sides.items() if s == "train"}

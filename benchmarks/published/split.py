"""The frozen train/test split of the published suite (issue #41).

    python benchmarks/published/split.py            # check split.yaml against cases/ (exit 1 if stale)
    python benchmarks/published/split.py --assign   # give new cases a side; never moves an assigned one

Each case is ``train`` or ``test``. Within each stratum (family, source URL, engine, GPU), cases
are ordered by a hash of their id and the first 30% (rounded up where the stratum has two or more
cases) go to ``test``; a stratum of one case goes to ``test`` when its id's hash falls in the
lowest 30%. So every source, engine, GPU and family is in both sides where it has the cases for
it, and the assignment depends on nothing but the ids. split.yaml keeps the assignment: a case
added later gets its side once (``--assign``) and keeps it; removing a case drops its line.

Fitting scripts read only ``train`` (``train_ids()``); run.py reports both sides and the README
quotes ``test``. The constants fitted before the split was frozen (2026-12-06) saw every case:
split.yaml says so in its header, and a test figure counts as held out only for fits made after.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from suite import CASES_DIR, load_cases  # noqa: E402

SPLIT_FILE = Path(__file__).resolve().parent / "split.yaml"
TEST_SHARE = 0.30
HEADER = """\
# The frozen train/test split of benchmarks/published/cases (benchmarks/published/split.py).
# Frozen 2026-12-06. Every constant fitted before that date (profiles' host times, efficiency
# curves, all-reduce curves, memory overheads: benchmarks/RESULTS.md rounds 1-16) was fitted or
# chosen on all cases, test ones included; a fit made since reads only train (split.train_ids).
"""


def _hash(case_id: str) -> int:
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:8], "big")


def stratum(case) -> tuple:
    return case.family, case.citation["url"], case.engine, str(case.scenario.get("gpu"))


def assign(cases, share: float = TEST_SHARE) -> dict[str, str]:
    """Case id -> ``train`` or ``test`` (module docstring)."""
    groups = defaultdict(list)
    for c in cases:
        groups[stratum(c)].append(c.id)
    out = {}
    for ids in groups.values():
        ids = sorted(ids, key=_hash)
        if len(ids) == 1:
            n_test = 1 if _hash(ids[0]) / 2**64 < share else 0
        else:
            n_test = math.ceil(share * len(ids))
        out.update((i, "test" if k < n_test else "train") for k, i in enumerate(ids))
    return out


def read_split(path: Path = SPLIT_FILE) -> dict[str, str]:
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    return dict(data or {})


def write_split(split: dict[str, str], path: Path = SPLIT_FILE) -> None:
    path.write_text(HEADER + yaml.safe_dump(dict(sorted(split.items())), sort_keys=False))


def train_ids(path: Path = SPLIT_FILE) -> set[str]:
    """The ids a fitting script may read."""
    return {i for i, side in read_split(path).items() if side == "train"}


def update(cases, split: dict[str, str]) -> tuple[dict[str, str], list[str], list[str]]:
    """(split with new cases assigned and removed ones dropped, added ids, dropped ids)."""
    ids = {c.id for c in cases}
    fresh = assign(cases)
    added = sorted(i for i in ids if i not in split)
    dropped = sorted(i for i in split if i not in ids)
    new = {i: s for i, s in split.items() if i in ids}
    new.update((i, fresh[i]) for i in added)
    return new, added, dropped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--assign", action="store_true", help="assign new cases, drop removed ones, write split.yaml")
    args = ap.parse_args(argv)
    cases = load_cases(CASES_DIR)
    split, added, dropped = update(cases, read_split())
    if args.assign:
        write_split(split)
    n_test = sum(1 for s in split.values() if s == "test")
    print(f"{len(split)} cases: {n_test} test ({n_test / len(split):.1%}), {len(split) - n_test} train; "
          f"{len(added)} new, {len(dropped)} removed" + ("" if args.assign or not (added or dropped)
                                                          else ": run split.py --assign"))
    return 0 if args.assign or not (added or dropped) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Do the shipped scenarios give the same results as before a change?

    python benchmarks/identical_outputs.py record BASE.json [--sim PATH_TO_SIM]
    python benchmarks/identical_outputs.py check BASE.json [--sim PATH_TO_SIM]

``record`` runs every ``scenarios/*.yaml`` through the ``sim run`` command line (``--no-report``,
so it needs only the simulator) and stores, per scenario, the SHA-256 of ``summary.json``
(with ``sim_wall_s``, the only machine-dependent number, removed), ``requests.csv`` and
``steps.csv``. ``check`` runs them again and lists every file whose bytes changed; it exits 1
if any did. ``--drop NAME`` (repeatable) leaves a key a change adds out of summary.json on both
sides: every mapping key NAME at any depth, and NAME as an item of any list. It drives the command line, not the modules, so it works across refactorings
that move code: record on the old tree, check on the new one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ("summary.json", "requests.csv", "steps.csv")


DROP: set[str] = set()  # --drop: summary keys a change adds


def _without(value, names: set[str]):
    if isinstance(value, dict):
        return {k: _without(v, names) for k, v in value.items() if k not in names}
    if isinstance(value, list):
        return [_without(v, names) for v in value if not (isinstance(v, str) and v in names)]
    return value


def _digest(path: Path) -> str:
    data = path.read_bytes()
    if path.name == "summary.json":
        summary = _without(json.loads(data), {"sim_wall_s", *DROP})
        data = json.dumps(summary, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def run_all(sim: str, root: Path) -> dict[str, dict[str, str]]:
    digests: dict[str, dict[str, str]] = {}
    work = Path(tempfile.mkdtemp(prefix="kvsim-identical-"))
    try:
        for scenario in sorted((root / "scenarios").glob("*.yaml")):
            out = work / scenario.stem
            proc = subprocess.run([sim, "run", str(scenario), "--no-report", "--quiet", "--out", str(out)],
                                  capture_output=True, text=True, cwd=root, check=False)
            if proc.returncode != 0:
                digests[scenario.name] = {"error": proc.stderr.strip().splitlines()[-1:][0] if proc.stderr else
                                          f"exit {proc.returncode}"}
            else:
                digests[scenario.name] = {name: _digest(out / name) for name in FILES}
            print(f"{scenario.name}: {'ok' if proc.returncode == 0 else digests[scenario.name]['error']}",
                  file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return digests


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["record", "check"])
    ap.add_argument("baseline", help="JSON file of digests (written by record, read by check)")
    ap.add_argument("--sim", default=shutil.which("sim") or "sim", help="the sim executable")
    ap.add_argument("--root", default=str(ROOT), help="repository whose scenarios/ to run")
    ap.add_argument("--drop", action="append", default=[], metavar="NAME",
                    help="leave summary key NAME out on both sides (a key the change adds); repeatable")
    args = ap.parse_args()
    DROP.update(args.drop)
    digests = run_all(args.sim, Path(args.root))
    if args.action == "record":
        Path(args.baseline).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(digests)} scenarios in {args.baseline}")
        return 0
    base = json.loads(Path(args.baseline).read_text())
    changed = [f"{sc}: {name}" for sc in sorted(set(base) | set(digests))
               for name in sorted(set(base.get(sc, {})) | set(digests.get(sc, {})))
               if base.get(sc, {}).get(name) != digests.get(sc, {}).get(name)]
    for line in changed:
        print(f"changed: {line}")
    print(f"{len(digests)} scenarios, {len(changed)} files changed")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

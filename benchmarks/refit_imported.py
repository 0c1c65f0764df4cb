"""What refit_imported_gemm.py and refit_imported_decode.py share: the tables a shipped imported
calibration (``calibrations/<gpu>@<backend>.yaml``) was fitted on, the file rewritten with one kernel
replaced, and the command loop over files (``--files``, ``--check``)."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from microbench.aiconfigurator import SYSTEMS, import_records  # noqa: E402
from sim.calib.calibration import calibration_to_dict, load_calibration  # noqa: E402


def imported(path: Path, kernel: str):
    """(the calibration, its text, the records of ``kernel`` converted again from the tables of its GPU
    and backend at the framework version the kernel was imported at, the import's device)."""
    gpu, backend = path.stem.split("@")
    system = {s.datasheet: name for name, s in SYSTEMS.items()}[gpu]
    cal = load_calibration(str(path))
    found = re.search(rf"{kernel}: {backend} (\S+?)(,|$)", cal.provenance.get("framework", ""))
    records, device, _ = import_records(system, backend, found.group(1) if found else None)
    return cal, path.read_text(), [r for r in records if r["kernel"] == kernel], device


def rewritten(cal, text: str, kernel: str, new, note_key: str, note: str, **fields) -> str:
    """The file's text with ``kernels.<kernel>`` replaced by ``new``, its cv MAPE in ``provenance.fit``,
    ``provenance.<note_key>`` set to ``note``, and ``fields`` (other top-level values) replaced."""
    prov = dict(cal.provenance)
    prov["fit"] = re.sub(rf"{kernel}: cv MAPE [0-9.]+%", f"{kernel}: cv MAPE {new.cv_mape:.1%}", prov.get("fit", ""))
    prov[note_key] = note
    out = dataclasses.replace(cal, kernels={**cal.kernels, kernel: new}, provenance=prov, **fields)
    header = text.split("\n", 1)[0]
    return header + "\n" + yaml.safe_dump(calibration_to_dict(out), sort_keys=False, width=120)


def main(argv, doc: str, refit, files_required: bool = False) -> int:
    """Refit each file named (default: every ``<gpu>@<backend>`` file with a system) with ``refit(path) ->
    (text, line)``; ``--check`` writes nothing and exits 1 if a file would change."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--files", nargs="+", required=files_required,
                    help="calibration names, e.g. l40s@vllm" + ("" if files_required else
                                                                  " (default: every <gpu>@<backend> with a system)"))
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    args = ap.parse_args(argv)
    gpus = {s.datasheet for s in SYSTEMS.values()}
    paths = [ROOT / "calibrations" / f"{name}.yaml" for name in args.files] if args.files else [
        p for p in sorted((ROOT / "calibrations").glob("*@*.yaml")) if p.stem.split("@")[0] in gpus]
    stale = []
    for path in paths:
        t0 = time.perf_counter()
        out, line = refit(path)
        if out != path.read_text():
            stale.append(path.name)
            if not args.check:
                path.write_text(out)
        print(f"{path.name}: {line} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 1 if args.check and stale else 0

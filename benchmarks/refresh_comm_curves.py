"""Put aiconfigurator-core's measured all-reduce curves into the shipped imported calibrations without
refitting their kernels (``microbench import aiconfigurator --comm-curves`` does the same on a fresh
import). The shipped files do not carry them: on the held-out TP cases of the published suite they did
worse (docs/MEASURED_KERNELS.md, "All-reduce curves from the tables"); this script is how that was
measured: run it, rerun the cases, then ``git checkout calibrations``.

    python benchmarks/refresh_comm_curves.py [--check]

For every ``calibrations/<gpu>@<backend>.yaml`` whose GPU has an aiconfigurator system, the NCCL and
the backend's own all-reduce curves replace the interconnect's curves (microbench/aiconfigurator_comm.py);
the rest of the file is rewritten byte for byte (the files are calibration_to_dict's output). The
backend version is the one the file's kernels were imported at (its provenance's ``framework``).
``--check`` writes nothing and exits 1 if a file would change. Needs the ``[import]`` extra.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from microbench.aiconfigurator import SYSTEMS  # noqa: E402
from microbench.aiconfigurator_comm import attach_comm  # noqa: E402
from sim.calib.calibration import calibration_to_dict, load_calibration  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    args = ap.parse_args(argv)
    by_gpu = {s.datasheet: name for name, s in SYSTEMS.items()}
    stale = []
    for path in sorted((ROOT / "calibrations").glob("*@*.yaml")):
        gpu, backend = path.stem.split("@")
        if gpu not in by_gpu:
            continue
        text = path.read_text()
        header = text.split("\n", 1)[0]
        cal = load_calibration(str(path))
        found = re.search(rf"gemm: {backend} (\S+?)(,|$)", cal.provenance.get("framework", ""))
        new = attach_comm(cal, by_gpu[gpu], backend, found.group(1) if found else None)
        out = header + "\n" + yaml.safe_dump(calibration_to_dict(new), sort_keys=False, width=120)
        if out != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(out)
        print(f"{path.name}: {'changed' if out != text else 'unchanged'}"
              f" ({new.provenance.get('interconnect_curves', 'no tables')[:140]})")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

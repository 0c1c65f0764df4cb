"""Refit the GEMM of the shipped imported calibrations (``calibrations/<gpu>@<backend>.yaml``) on their
tables, with the GEMM terms ``microbench import aiconfigurator`` fits now, leaving every other kernel
as it is (their fits are the slow part, and two files keep an older prefill fit on purpose).

    python benchmarks/refit_imported_gemm.py [--files h100-sxm@vllm ...] [--check]

For each file: the tables of its GPU and backend at the framework version its GEMM was imported at
(its provenance's ``framework``) are converted again (microbench.aiconfigurator.import_records), the
GEMM is fitted and cross-validated by shape as the import does (microbench.fit.fit_kernel with
``measured_gemm_tiles``: the tile/wave term, its regimes, split-k, its SM-fill cap and L2 residency) but on
the file's own tile (the import's tile search over seven candidates is kept out to make 15 files fit in minutes;
``microbench import aiconfigurator`` itself still searches), and the file's ``kernels.gemm``,
``peak_flops`` (the GEMM's fitted FLOP rate, as the import writes it) and the ``gemm`` entry of
``provenance.fit`` are replaced; the rest is rewritten byte for byte. ``--check``: write nothing,
exit 1 if a file would change. Needs the ``[import]`` extra.
"""

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
from microbench.fit import fit_kernel  # noqa: E402
from microbench.gemm_tiles import measured_gemm_tiles  # noqa: E402
from sim.calib.calibration import calibration_to_dict, load_calibration  # noqa: E402


NOTE = ("GEMM refitted with split-k, its SM-fill cap and L2 residency (the last two kept where they lower the "
        "fit's loss) by benchmarks/refit_imported_gemm.py, the tile of the first import kept")


def refit(path: Path) -> tuple[str, str]:
    """(the file's new text, one line on its GEMM before and after)."""
    gpu, backend = path.stem.split("@")
    system = {s.datasheet: name for name, s in SYSTEMS.items()}[gpu]
    text = path.read_text()
    cal = load_calibration(str(path))
    found = re.search(rf"gemm: {backend} (\S+?)(,|$)", cal.provenance.get("framework", ""))
    records, device, _ = import_records(system, backend, found.group(1) if found else None)
    old = cal.kernels["gemm"]
    tiles = measured_gemm_tiles(device)
    tiles = dataclasses.replace(tiles, candidates=((int(old.params["tile_m"]), int(old.params["tile_n"])),))
    new = fit_kernel("gemm", [r for r in records if r["kernel"] == "gemm"], grid=False, tiles=tiles)
    prov = dict(cal.provenance)
    prov["fit"] = re.sub(r"gemm: cv MAPE [0-9.]+%", f"gemm: cv MAPE {new.cv_mape:.1%}", prov.get("fit", ""))
    prov["gemm_refit"] = NOTE
    out = dataclasses.replace(cal, kernels={**cal.kernels, "gemm": new}, peak_flops=new.params["flops_per_s"],
                              provenance=prov)
    header = text.split("\n", 1)[0]
    line = f"gemm cv MAPE {old.cv_mape:.1%} -> {new.cv_mape:.1%}"
    return header + "\n" + yaml.safe_dump(calibration_to_dict(out), sort_keys=False, width=120), line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="+", help="calibration names (default: every <gpu>@<backend> with a system)")
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


if __name__ == "__main__":
    sys.exit(main())

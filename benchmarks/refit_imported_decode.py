"""Refit decode attention of shipped imported calibrations (``calibrations/<gpu>@<backend>.yaml``) on
their tables, with the decode terms ``microbench import aiconfigurator`` fits now, leaving every other
kernel as it is.

    python benchmarks/refit_imported_decode.py --files l40s@vllm ... [--check]

For each file: the tables of its GPU and backend at the framework version its decode attention was
imported at (its provenance's ``framework``) are converted again (microbench.aiconfigurator.import_records),
decode attention is fitted and cross-validated by shape as the import does (microbench.fit.fit_kernel
with the GPU's SM count: the split-KV form, and where they lower the fit's loss the L2-residency term
and, on TensorRT-LLM's tables, the MMHA-fallback term; FlashAttention-2's query-group swap on its
tables), and the file's ``kernels.decode_attention`` and the ``decode_attention`` entry of
``provenance.fit`` are replaced; the rest is rewritten as it was. Which files carry the refit is decided
by the held-out figures under both schemes (benchmarks/aiconfigurator_fit.py, benchmarks/RESULTS.md).
``--check``: write nothing, exit 1 if a file would change. Needs the ``[import]`` extra.
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
from microbench.gemm_tiles import device_gemm_tiles  # noqa: E402
from sim.calib.calibration import calibration_to_dict, load_calibration  # noqa: E402

NOTE = ("decode attention refitted with the terms kept where they lower the fit's loss (L2 residency; "
        "TensorRT-LLM's MMHA fallback) by benchmarks/refit_imported_decode.py")


def refit(path: Path) -> tuple[str, str]:
    """(the file's new text, one line on its decode attention before and after)."""
    gpu, backend = path.stem.split("@")
    system = {s.datasheet: name for name, s in SYSTEMS.items()}[gpu]
    text = path.read_text()
    cal = load_calibration(str(path))
    found = re.search(rf"decode_attention: {backend} (\S+?)(,|$)", cal.provenance.get("framework", ""))
    records, device, _ = import_records(system, backend, found.group(1) if found else None)
    old = cal.kernels["decode_attention"]
    new = fit_kernel("decode_attention", [r for r in records if r["kernel"] == "decode_attention"], grid=False,
                     tiles=device_gemm_tiles(device))
    prov = dict(cal.provenance)
    prov["fit"] = re.sub(r"decode_attention: cv MAPE [0-9.]+%", f"decode_attention: cv MAPE {new.cv_mape:.1%}",
                         prov.get("fit", ""))
    prov["decode_refit"] = NOTE
    out = dataclasses.replace(cal, kernels={**cal.kernels, "decode_attention": new}, provenance=prov)
    terms = [t for t, key in (("L2", "l2_bytes"), ("MMHA", "mmha_flops_per_s"), ("swap", "mha_full_ctas"))
             if key in new.params]
    line = f"decode cv MAPE {old.cv_mape:.2%} -> {new.cv_mape:.2%} ({', '.join(terms) or 'split-KV only'})"
    header = text.split("\n", 1)[0]
    return header + "\n" + yaml.safe_dump(calibration_to_dict(out), sort_keys=False, width=120), line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="+", required=True, help="calibration names, e.g. l40s@vllm")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    args = ap.parse_args(argv)
    stale = []
    for name in args.files:
        path = ROOT / "calibrations" / f"{name}.yaml"
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

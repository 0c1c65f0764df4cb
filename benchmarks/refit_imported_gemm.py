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

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from refit_imported import imported, main, rewritten  # noqa: E402

from microbench.fit import fit_kernel  # noqa: E402
from microbench.gemm_tiles import measured_gemm_tiles  # noqa: E402

NOTE = ("GEMM refitted with split-k, its SM-fill cap and L2 residency (the last two kept where they lower the "
        "fit's loss) by benchmarks/refit_imported_gemm.py, the tile of the first import kept")


def refit(path: Path) -> tuple[str, str]:
    """(the file's new text, one line on its GEMM before and after)."""
    cal, text, records, device = imported(path, "gemm")
    old = cal.kernels["gemm"]
    tiles = measured_gemm_tiles(device)
    tiles = dataclasses.replace(tiles, candidates=((int(old.params["tile_m"]), int(old.params["tile_n"])),))
    new = fit_kernel("gemm", records, grid=False, tiles=tiles)
    out = rewritten(cal, text, "gemm", new, "gemm_refit", NOTE, peak_flops=new.params["flops_per_s"])
    return out, f"gemm cv MAPE {old.cv_mape:.1%} -> {new.cv_mape:.1%}"


if __name__ == "__main__":
    sys.exit(main(None, __doc__, refit))

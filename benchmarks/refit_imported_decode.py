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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from refit_imported import imported, main, rewritten  # noqa: E402

from microbench.fit import fit_kernel  # noqa: E402
from microbench.gemm_tiles import device_gemm_tiles  # noqa: E402

NOTE = ("decode attention refitted with the terms kept where they lower the fit's loss (L2 residency; "
        "TensorRT-LLM's MMHA fallback) by benchmarks/refit_imported_decode.py")


def refit(path: Path) -> tuple[str, str]:
    """(the file's new text, one line on its decode attention before and after)."""
    cal, text, records, device = imported(path, "decode_attention")
    old = cal.kernels["decode_attention"]
    new = fit_kernel("decode_attention", records, grid=False, tiles=device_gemm_tiles(device))
    terms = [t for t, key in (("L2", "l2_bytes"), ("MMHA", "mmha_flops_per_s"), ("swap", "mha_full_ctas"))
             if key in new.params]
    line = f"decode cv MAPE {old.cv_mape:.2%} -> {new.cv_mape:.2%} ({', '.join(terms) or 'split-KV only'})"
    return rewritten(cal, text, "decode_attention", new, "decode_refit", NOTE), line


if __name__ == "__main__":
    sys.exit(main(None, __doc__, refit, files_required=True))

"""The CPU tier's block copies in the calibration (#43): ``microbench calibrate`` times the
tier's own scattered block copies (``swap_in`` / ``swap_out``), and the simulator's tier takes
its bandwidth from their fits where a calibration has them, else from the contiguous host copy."""

from __future__ import annotations

import dataclasses

import pytest

from microbench.fit import fit_kernel
from microbench.suites import SWAP_BLOCK_BYTES, cases
from sim.calib.calibration import load_calibration
from sim.engine.parts import swap_bandwidth


def _records(kernel: str, bandwidth: float, overhead: float) -> list[dict]:
    return [{"kernel": kernel, "num_bytes": b, "block_bytes": SWAP_BLOCK_BYTES, "pinned": False,
             "time_s": overhead + b / bandwidth} for b in (1 << 16, 1 << 20, 1 << 24, 1 << 26)]


def test_the_tier_reads_the_swap_fits_and_falls_back_to_the_host_copy() -> None:
    cal = load_calibration("h100-sxm")
    assert "swap_in" not in cal.kernels  # a calibration from before the swap cases
    assert swap_bandwidth(cal, "swap_in") == swap_bandwidth(cal, "swap_out") == cal.pcie_bandwidth_bytes_per_s
    fits = {k: fit_kernel(k, _records(k, bw, 1e-5)) for k, bw in (("swap_in", 20e9), ("swap_out", 30e9))}
    cal = dataclasses.replace(cal, kernels={**cal.kernels, **fits})
    assert swap_bandwidth(cal, "swap_in") == pytest.approx(20e9, rel=0.02)
    assert swap_bandwidth(cal, "swap_out") == pytest.approx(30e9, rel=0.02)


def test_the_suite_times_scattered_block_copies_both_ways() -> None:
    for device in ("cpu", "cuda"):
        swaps = [(k, s) for k, s in cases([], device, quick=True) if k in ("swap_in", "swap_out")]
        assert {k for k, _ in swaps} == {"swap_in", "swap_out"}
        assert all(s["block_bytes"] == SWAP_BLOCK_BYTES and s["num_bytes"] >= 2 * SWAP_BLOCK_BYTES for _, s in swaps)
        assert {s["pinned"] for _, s in swaps} == ({True, False} if device == "cuda" else {False})

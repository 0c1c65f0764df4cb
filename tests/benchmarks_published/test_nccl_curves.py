"""The shipped 2- and 4-GPU all-reduce curves are what benchmarks/nccl/curves.py makes of Vidur's profiles.

A calibration's numbers must come from a measurement and say which: this ties every 2- and 4-GPU
point of the NVLink calibrations to the published rows kept in benchmarks/nccl/, so an edit to
either side shows. It also checks the script's window and the profiles' own shape: times rise with
the message from 2 MiB on, as the smooth part of the rows does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sim.calib.calibration import load_calibration

_path = Path(__file__).resolve().parents[2] / "benchmarks" / "nccl" / "curves.py"
_spec = importlib.util.spec_from_file_location("nccl_curves", _path)
curves = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(curves)

SHIPPED = {"a100-80gb": "a100", "a100-40gb": "a100", "h100-sxm": "h100", "h200": "h100"}


@pytest.mark.parametrize("name", sorted(SHIPPED))
@pytest.mark.parametrize("num_gpus", [2, 4])
def test_the_shipped_curve_is_the_scripts_reading_of_the_profile(name: str, num_gpus: int) -> None:
    points = curves.curve(curves.rows(curves.FILES[SHIPPED[name]]), num_gpus)
    shipped = load_calibration(name).interconnect.numbers(num_gpus).allreduce_curve
    assert len(points) >= 5 and points[0][0] == 2 ** 21
    assert [list(p) for p in zip(shipped.sizes, shipped.times, strict=True)] == points


@pytest.mark.parametrize("gpu", sorted(curves.FILES))
def test_the_profiles_hold_one_node_rows_at_2_4_and_8_gpus_rising_from_2_mib(gpu: str) -> None:
    data = curves.rows(curves.FILES[gpu])
    assert {n for n, _, _ in data} == {2, 4, 8}
    for n in (2, 4, 8):
        times = [t for _, t in curves.curve(data, n)]
        assert times == sorted(times), (gpu, n, times)  # no dip once the bandwidth shows
        assert 1e-5 < times[0] < 2e-4 and times[-1] < 2e-3


def test_the_window_is_a_quarter_octave_and_as_wide_on_both_sides_at_the_end() -> None:
    # two sizes inside 2 MiB's window (1.19x each way), one outside; the largest size ends its own window
    data = [(2, 1_800_000, 1.0), (2, 2_400_000, 3.0), (2, 2_600_000, 99.0), (2, 4_194_304, 5.0), (2, 3_600_000, 7.0)]
    assert curves.curve(data, 2) == [[2 ** 21, 2.0], [2 ** 22, 5.0]]

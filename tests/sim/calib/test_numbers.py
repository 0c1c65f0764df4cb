"""One rule for a number in a calibration file (sim/calib/numbers.py), in every section that reads one.

A hand-written calibration may spell 4e-5 without a dot, which YAML 1.1 reads as a string: every
section takes it as the number it spells. Booleans, NaN, infinities and words are refused with one
line naming the file and the key path.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.calib.calibration import load_calibration
from sim.calib.numbers import finite_number, number_in, yaml_float
from sim.errors import ConfigError

REPO_CALIBRATIONS = Path(__file__).resolve().parents[3] / "calibrations"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_float_spelled_as_yaml_writes_it_reads_back_as_itself(x: float) -> None:
    text = yaml.safe_dump({"v": x})
    assert finite_number(yaml.safe_load(text)["v"], "f.yaml", "v") == x
    assert finite_number(repr(x), "f.yaml", "v") == x  # the spelling YAML 1.1 leaves a string


@pytest.mark.parametrize("bad", [True, False, "fast", "nan", "1e", math.nan, math.inf, -math.inf, None, [1.0], "0x10"])
def test_anything_but_a_finite_number_is_refused_in_one_line(bad) -> None:
    with pytest.raises(ConfigError) as err:
        finite_number(bad, "f.yaml", "a.b", what="bytes")
    assert err.value.file == "f.yaml" and err.value.key == "a.b"
    assert "expected a number (bytes)" in err.value.message and "\n" not in str(err.value)


def test_the_range_is_inclusive_and_named() -> None:
    assert number_in("1e3", "f.yaml", "k", 1e3, 1e4) == 1e3 and number_in(1e4, "f.yaml", "k", 1e3, 1e4) == 1e4
    with pytest.raises(ConfigError, match=r"seconds 11 is outside the allowed range 1e-07 to 10"):
        number_in(11, "f.yaml", "k", 1e-7, 10.0, what="seconds")
    assert yaml_float(" 2E+3 ") == 2000.0 and yaml_float("x") == "x" and yaml_float(7) == 7


def _with(tmp_path: Path, name: str, edit) -> Path:
    data = yaml.safe_load((REPO_CALIBRATIONS / f"{name}.yaml").read_text())
    edit(data)
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(data).replace("'4e-5'", "4e-5"))  # unquoted, as a person types it
    return path


def _set(*keys, value):
    def edit(data: dict) -> None:
        d = data
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return edit


@pytest.mark.parametrize(("name", "keys", "read"), [
    ("a100-80gb", ("kernel_launch_s",), lambda cal: cal.kernel_launch_s),
    ("a100-80gb", ("interconnect", "allreduce_latency_s"), lambda cal: cal.interconnect.allreduce_latency(2)),
    ("cpu-epyc-2core", ("composition", "per_layer_s"), lambda cal: cal.composition.per_layer_s),
])
def test_every_section_reads_an_exponent_without_a_dot(tmp_path: Path, name: str, keys: tuple, read) -> None:
    path = _with(tmp_path, name, _set(*keys, value="4e-5"))
    assert ": 4e-5\n" in path.read_text()  # YAML 1.1 reads it back as the string '4e-5'
    assert read(load_calibration(str(path))) == 4e-5


def test_a_curve_point_takes_an_exponent_without_a_dot_and_refuses_a_boolean(tmp_path: Path) -> None:
    curve = [[1024, "4e-5"], [4096, 6e-5]]
    path = _with(tmp_path, "a100-80gb", _set("interconnect", "by_num_gpus", value={8: {"allreduce_curve": curve}}))
    assert load_calibration(str(path)).interconnect.numbers(8).allreduce_curve.times[0] == 4e-5
    path.write_text(path.read_text().replace("4e-5", "true"))
    with pytest.raises(ConfigError) as err:
        load_calibration(str(path))
    assert err.value.key == "interconnect.by_num_gpus.8.allreduce_curve[0]" and "(seconds)" in err.value.message


@pytest.mark.parametrize(("name", "keys", "value", "says"), [
    ("cpu-epyc-2core", ("composition", "per_layer_s"), True, "expected a number"),
    ("cpu-epyc-2core", ("composition", "scale"), "many", "expected a number"),
    ("cpu-epyc-2core", ("composition", "per_step_s"), 1e13, "outside the allowed range"),
    ("cpu-epyc-2core", ("kernels", "gemm", "cv_mape"), -0.5, "outside the allowed range 0 to 1e+12"),
    ("a100-80gb", ("compute_peaks", "fp16"), "nan", "expected a number"),
    ("a100-80gb", ("dequant", "int8"), 0.0, "must be in (0, 1]"),
])
def test_a_bad_number_names_the_file_and_the_key(tmp_path: Path, name: str, keys: tuple, value, says: str) -> None:
    path = _with(tmp_path, name, _set(*keys, value=value))
    with pytest.raises(ConfigError) as err:
        load_calibration(str(path))
    assert err.value.file == str(path) and err.value.key == ".".join(keys) and says in err.value.message

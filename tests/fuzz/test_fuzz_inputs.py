"""Fuzzing the other inputs of `sim run`: ``--set`` assignments, trace CSVs and calibration
YAML. Each case either runs (exit 0, finite summary.json) or fails with one error line
naming the file at fault (and for a trace the line and column), never echoing a trace's
content."""

from __future__ import annotations

import copy
import csv
import io
import itertools
from pathlib import Path

import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from fuzzkit import REPO, TINY, error_parts, run_args, run_cli, write_yaml

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_case = itertools.count()
SECRET = "TOPSECRET"  # in every fuzzed trace cell that is not a number: must never be printed

# ----------------------------------------------------------------------------- --set

KEYS = ["kv.block_size", "engine.max_model_len", "workload.arrival.rate", "kv.swap_space_gb", "seed",
        "workload.duration_s", "scheduler.watermark", "kv.allocator", "engine", "nosuch.key", "kv..x",
        "workload.prompt_tokens.value", "slo.ttft_s", "workload.prompt_tokens", "engine.kv_dtype", ""]
RAW_VALUES = ["16", "0", "-3", "1e12", "1.0e12", ".inf", ".nan", "-.inf", "[1, 2]", "{a: 1}", "null", "true",
              "'x'", "[", "{", ": :", "&a [*a]", "*nope", "9" * 5000, "fp8", "paged", "2.5", "7",
              "!!python/object:os.system x", "\t", "a\nb"]


@SETTINGS
@given(key=st.sampled_from(KEYS), raw=st.one_of(st.sampled_from(RAW_VALUES), st.text(max_size=10)),
       eq=st.sampled_from(["=", "", "==", " = "]))
@example(key="", raw="-.inf", eq="")  # found by a run: argparse took "-.inf" for an option
def test_set_assignments(tmp_path: Path, capsys, key: str, raw: str, eq: str) -> None:
    n = next(_case)
    scenario = write_yaml(tmp_path / f"s{n}.yaml", TINY)
    out = tmp_path / f"o{n}"
    code, err = run_cli(capsys, run_args(scenario, out, "--set", f"{key}{eq}{raw}"), "--set", out)
    if code == 2:
        assert error_parts(err)[0] == str(scenario), err


# ----------------------------------------------------------------------------- traces

HEADER = ["arrived_at", "num_prefill_tokens", "num_decode_tokens"]
CELLS = st.one_of(st.sampled_from(["0", "1", "3", "12", "0.5", "-1", "nan", "inf", "-inf", "1e300", "",
                                   SECRET, f"{SECRET},x", "1e20", "20000000", " 7 ", "1_0"]),
                  st.integers(0, 50).map(str))


@st.composite
def traces(draw):
    """A valid trace with at most one fault: a bad cell, a short or long row, another header,
    a bad encoding, NUL bytes, or no content at all."""
    n = draw(st.integers(1, 6))
    rows = [[str(i * 0.1), str(draw(st.integers(1, 40))), str(draw(st.integers(1, 20)))] for i in range(n)]
    header = list(HEADER)
    fault = draw(st.sampled_from(["none", "none", "cell", "cell", "short", "long", "header", "utf8", "nul",
                                  "empty", "unsorted"]))
    r, c = draw(st.integers(0, n - 1)), draw(st.integers(0, 2))
    if fault == "cell":
        rows[r][c] = draw(CELLS)
    elif fault == "short":
        rows[r] = rows[r][:c]
    elif fault == "long":
        rows[r].append(SECRET)
    elif fault == "header":
        header = draw(st.sampled_from([HEADER[:2], [SECRET, *HEADER[1:]], HEADER + ["extra"]]))
        if len(header) == 4:
            rows = [row + ["1"] for row in rows]
    elif fault == "unsorted" and n > 1:
        rows[r][0], rows[-1][0] = rows[-1][0], rows[r][0]
        rows[0][0] = "5"
    buf = io.StringIO()
    csv.writer(buf).writerows([header, *rows])
    data = buf.getvalue().encode()
    if fault == "utf8":
        return data + b"\xff\xfe" + SECRET.encode() + b"\n"
    if fault == "nul":
        return data + b"1,\x002,3\n"
    return b"" if fault == "empty" else data


@SETTINGS
@given(data=traces(), speedup=st.sampled_from([1.0, 1.0, 2.0, 1e-300, 1e300]))
def test_trace_files(tmp_path: Path, capsys, data: bytes, speedup: float) -> None:
    n = next(_case)
    trace = tmp_path / f"t{n}.csv"
    trace.write_bytes(data)
    sc = copy.deepcopy(TINY)
    sc["workload"] = {"trace": {"path": str(trace), "speedup": speedup}, "num_requests": 5}
    scenario = write_yaml(tmp_path / f"s{n}.yaml", sc)
    out = tmp_path / f"o{n}"
    code, err = run_cli(capsys, run_args(scenario, out), "trace CSV", out)
    assert SECRET not in err
    if code == 2:
        file, key, _ = error_parts(err)
        assert file in (str(trace), str(scenario)), err
        if file == str(trace) and key.startswith("line "):
            assert ", column " in key or "cells" in err or "malformed CSV" in err, err


# ------------------------------------------------------------------------ calibrations

BASE_CAL = yaml.safe_load((REPO / "calibrations" / "a100-80gb.yaml").read_text())
CAL_KEYS = ["memory_bytes", "hbm_bandwidth_bytes_per_s", "bandwidth_efficiency", "peak_flops",
            "pcie_bandwidth_bytes_per_s", "kernel_launch_s", "step_overhead_s", "schema", "source",
            "compute_efficiency", "compute_efficiency.eff_max", "compute_efficiency.m_half_tokens",
            "provenance", "kernels", "composition", "nosuch"]
CAL_VALUES = st.one_of(st.sampled_from([0, -1, 1, 2, 0.5, 1e20, 10**30, 10**40, 1e-300, float("inf"), float("nan"),
                                        "1e12", "fast", "", None, True, [1], {"a": 1}, 8 << 30, 2e12]),
                       st.text(max_size=6))


@SETTINGS
@given(changes=st.lists(st.tuples(st.sampled_from(CAL_KEYS), CAL_VALUES), min_size=1, max_size=2))
def test_calibration_files(tmp_path: Path, capsys, changes) -> None:
    n = next(_case)
    cal = copy.deepcopy(BASE_CAL)
    for key, value in changes:
        node, *rest = key.split(".")
        if rest and isinstance(cal.get(node), dict):
            cal[node][rest[0]] = value
        else:
            cal[node] = value
    cal_path = write_yaml(tmp_path / f"c{n}.yaml", cal)
    sc = copy.deepcopy(TINY)
    sc["gpu"] = str(cal_path)
    scenario = write_yaml(tmp_path / f"s{n}.yaml", sc)
    out = tmp_path / f"o{n}"
    code, err = run_cli(capsys, run_args(scenario, out), "calibration YAML", out)
    if code == 2:
        assert error_parts(err)[0] in (str(cal_path), str(scenario)), err

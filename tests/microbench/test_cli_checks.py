"""Every bad flag or file of ``microbench`` is one ``error:`` line and exit 2, found before any
timing starts; calibrate writes into calibrations-measured/ by default, keeps its measurements
whatever fails after them, and warns loudly about absurd fits."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import microbench.calibrate as calibrate_mod
from microbench import checks, records
from microbench.cli import main

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]
GOOD = [{"kernel": "gemm", "m": m, "n": n, "k": 1024, "dtype": "fp16",
         "time_s": 4e-6 + max(2 * 1024 * n / 1e12, 2 * m * n * 1024 / 1e14)}
        for n in (1024, 4096) for m in (1, 16, 256, 4096)]
GOOD += [{"kernel": "copy_h2d", "num_bytes": b, "pinned": True, "time_s": 1e-5 + b / 2e10} for b in (1 << 16, 1 << 24, 1 << 28)]
GOOD += [{"kernel": "step", "num_seqs": s, "vocab_size": 32000, "time_s": 1e-4 + s * 1e-7} for s in (1, 8, 64)]
DEVICE = {"record": "device", "name": "foreign", "gpu_name": "Some GPU", "memory_bytes": 1 << 34}


@pytest.fixture
def no_timing(monkeypatch):
    """Fails the test if a sweep starts; no real CUDA either way."""
    def sweep(*a, **k):
        raise AssertionError("timing started")

    monkeypatch.setattr(calibrate_mod, "run_sweep", sweep)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _jsonl(tmp_path: Path, *lines) -> str:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\n".join(x if isinstance(x, bytes) else json.dumps(x).encode() for x in lines) + b"\n")
    return str(path)


def _one_error(capsys, rc: int, fragment: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), (rc, err)
    assert fragment in err[0], err[0]
    return err[0]


BAD_ARGV = [
    (["calibrate", "--gpu", "0"], "--gpu: cuda:0: no CUDA device here"),
    (["calibrate", "--device", "cuda"], "--device: cuda: no CUDA device here"),
    (["calibrate", "--device", "cuda:1"], "no CUDA device here"),
    (["calibrate", "--gpu", "-1"], "--gpu: expected a CUDA device index >= 0"),
    (["calibrate", "--gpu", "x"], "--gpu: invalid int value: 'x'"),
    (["calibrate", "--device", "cpu", "--threads", "0"], "--threads: expected a number of CPU threads >= 1"),
    (["calibrate", "--device", "cpu", "--threads", "-2"], "--threads: expected"),
    (["calibrate", "--device", "tpu"], "--device: got 'tpu'; allowed: cpu, cuda, cuda:N"),
    (["calibrate", "--device", "CPU"], "allowed: cpu, cuda"),
    (["calibrate"], "one of the arguments --gpu --device is required"),
    (["calibrate", "--gpu", "0", "--device", "cpu"], "not allowed with argument"),
    (["calibrate", "--device", "cpu", "--model", "no-such-model"], "no-such-model"),
    (["calibrate", "--device", "cpu", "--bogus"], "--bogus: unrecognized argument"),
    (["calibrate", "--device", "cpu", "--out", "x.jsonl"], "--out: 'x.jsonl': expected a calibration file name ending in .yaml"),
    (["calibrate", "--device", "cpu", "--out", "/proc/kvsim-cal.yaml"], "--out: cannot write /proc/kvsim-cal.yaml"),
    (["calibrate", "--device", "cpu", "--out", "bad\0name.yaml"], "--out: 'bad\\x00name.yaml': a file name cannot hold a NUL byte"),
    (["nonsense"], "command: invalid choice: 'nonsense'"),
    ([], "the following arguments are required: command"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "abc", "--n", "1", "--k", "1"], "--m: expected a number in [0, 1e+13], got 'abc'"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "-4", "--n", "1", "--k", "1"], "--m: expected"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "nan", "--n", "1", "--k", "1"], "--m: expected"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "9" * 400, "--n", "1", "--k", "1"], "--m: expected"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "1", "--n", "1", "--k", "1", "--dtype", "fp64"], "--dtype: got 'fp64'; allowed: fp32, bf16"),
    (["predict", "a100-80gb", "--kernel", "copy_h2d", "--num-bytes", "8", "--pinned", "maybe"], "--pinned: expected true or false"),
    (["predict", "a100-80gb", "--kernel", "flash"], "--kernel: unknown kernel 'flash'; allowed: gemm"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "4"], "missing n, k"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m"], "expected --field value pairs"),
    (["predict", "a100-80gb"], "the following arguments are required: --kernel"),
    (["predict", "no-such-gpu", "--kernel", "gemm"], "unknown GPU calibration 'no-such-gpu'; use one of: a10, a100-40gb"),
    (["fit", "/nonexistent.jsonl", "-o", "x.yaml"], "/nonexistent.jsonl: <root>: cannot read measurements"),
    (["fit", "/dev/null", "-o", "x.yaml"], "/dev/null: <root>: cannot read measurements: not a regular file"),
    (["fit", "m.jsonl"], "the following arguments are required: -o/--out"),
    (["fit", "m.jsonl", "-o", "x.yaml", "--folds", "1"], "--folds: expected at least 2"),
    (["fit", "m.jsonl", "-o", "x.yaml", "--folds", "two"], "--folds: invalid int value"),
]


@pytest.mark.parametrize("argv, fragment", BAD_ARGV, ids=[" ".join(a)[:60] or "<none>" for a, _ in BAD_ARGV])
def test_bad_flags_are_one_error_line_before_any_timing(argv, fragment, no_timing, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _one_error(capsys, main(argv), fragment)


def test_cuda_index_past_the_devices(no_timing, monkeypatch, capsys) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    _one_error(capsys, main(["calibrate", "--gpu", "3"]), "--gpu: no CUDA device 3; this machine has 1")


def test_missing_torch(no_timing, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    _one_error(capsys, main(["calibrate", "--device", "cpu"]), "calibrate: needs torch, which cannot be imported")


@pytest.mark.parametrize("make", ["directory", "under a file", "directory named like the jsonl"])
def test_unusable_out(make, no_timing, tmp_path, capsys) -> None:
    if make == "directory":
        out = tmp_path
    elif make == "under a file":
        (tmp_path / "f").write_text("")
        out = tmp_path / "f" / "cal.yaml"
    else:
        (tmp_path / "cal.jsonl").mkdir()
        out = tmp_path / "cal.yaml"
    runs = [["calibrate", "--device", "cpu", "--out", str(out)]]
    if make != "directory named like the jsonl":  # fit writes no JSONL
        runs.append(["fit", _jsonl(tmp_path, DEVICE, *GOOD), "-o", str(out)])
    for argv in runs:
        line = _one_error(capsys, main(argv), "--out: ")
        assert "directory" in line or "cannot write" in line


BAD_JSONL = [
    ("short line", [b"{"], "line 1: not JSON"),
    ("a number", [b"1"], "line 1: expected a JSON object"),
    ("non-numeric time", [{**GOOD[0], "time_s": "fast"}], "line 1.time_s: expected seconds in (0, 1e6), got 'fast'"),
    ("non-numeric field", [{**GOOD[0], "m": "many"}], "line 1.m: expected a number in [0, 1e+13]"),
    ("NaN time", [b'{"kernel": "gemm", "m": 1, "n": 1, "k": 1, "dtype": "fp16", "time_s": NaN}'], "line 1.time_s"),
    ("infinite field", [b'{"kernel": "gemm", "m": Infinity, "n": 1, "k": 1, "dtype": "fp16", "time_s": 1}'], "line 1.m"),
    ("huge integer", [{**GOOD[0], "n": 10**400}], "line 1.n: expected a number in [0, 1e+13]"),
    ("a dimension past any GPU", [{**GOOD[0], "m": 1e308}], "line 1.m: expected a number in [0, 1e+13], got 1e+308"),
    ("too many digits", [b'{"kernel": "gemm", "m": ' + b"9" * 5000 + b"}"], "line 1: not JSON"),
    ("deep nesting", [b"[" * 100_000 + b"]" * 100_000], "line 1: not JSON"),
    ("unknown kernel", [{**GOOD[0], "kernel": "flash"}], "line 1.kernel: got 'flash'; allowed: gemm"),
    ("kernel a list", [{**GOOD[0], "kernel": ["gemm"]}], "line 1.kernel: got ['gemm']"),
    ("missing field", [{k: v for k, v in GOOD[0].items() if k != "n"}], "line 1.n: expected a number in [0, 1e+13], got None"),
    ("missing time", [{k: v for k, v in GOOD[0].items() if k != "time_s"}], "line 1.time_s"),
    ("dtype a list", [{**GOOD[0], "dtype": ["fp16"]}], "line 1.dtype: got ['fp16']"),
    ("bad device memory", [{**DEVICE, "memory_bytes": "lots"}, *GOOD], "line 1.memory_bytes: expected an integer"),
    ("two device records", [DEVICE, DEVICE, *GOOD], "line 2: a second device record"),
    ("no records", [DEVICE], "<root>: no measurement records"),
    ("one record of a kernel", [DEVICE, *GOOD, {**GOOD[-1], "kernel": "rmsnorm", "num_tokens": 4, "hidden_size": 8,
                                                "dtype": "fp16"}], "rmsnorm: need at least 2 records"),
    ("implausible times", [DEVICE, *({**r, "time_s": r["time_s"] * 1e-5} if r["kernel"] == "copy_h2d" else r for r in GOOD)],
     "the fitted calibration is unusable"),
    ("non-UTF-8", [b"\xff\xfe\x00garbage"], "<root>: cannot read measurements: 'utf-8' codec can't decode"),
]


@pytest.mark.parametrize("lines, fragment", [c[1:] for c in BAD_JSONL], ids=[c[0] for c in BAD_JSONL])
def test_bad_measurements_are_one_error_line(lines, fragment, tmp_path, capsys) -> None:
    out = tmp_path / "cal.yaml"
    _one_error(capsys, main(["fit", _jsonl(tmp_path, *lines), "-o", str(out)]), fragment)
    assert not out.exists()


def test_a_huge_measurement_file_is_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(records, "MAX_JSONL_BYTES", 1 << 10)
    _one_error(capsys, main(["fit", _jsonl(tmp_path, DEVICE, *GOOD * 3), "-o", str(tmp_path / "c.yaml")]),
               "bytes, more than the 1,024 allowed (fit a subset)")
    monkeypatch.setattr(records, "MAX_JSONL_BYTES", 1 << 20)
    monkeypatch.setattr(records, "MAX_RECORDS", 5)
    _one_error(capsys, main(["fit", _jsonl(tmp_path, DEVICE, *GOOD), "-o", str(tmp_path / "c.yaml")]),
               "line 7: more than 5 measurement records")

"""Fuzz ``microbench fit``: random mutations of a valid measurement JSONL either fit (exit 0, a
calibration that loads back) or are refused with one ``error:`` line and exit 2; never a traceback.

FUZZ_EXAMPLES (environment) sets the number of cases (default 60); the test prints the count.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from microbench.cli import main
from sim.calib.calibration import load_calibration

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))


def valid_lines() -> list[dict]:
    device = {"record": "device", "name": "fuzz", "gpu_name": "Fuzz GPU", "memory_bytes": 1 << 34,
              "provenance": {"date": "2025-01-01T00:00:00+00:00"}}
    recs = [{"kernel": "gemm", "m": m, "n": n, "k": 1024, "dtype": "fp16",
             "time_s": 4e-6 + max(2 * 1024 * n / 1e12, 2 * m * n * 1024 / 1e14)}
            for n in (1024, 4096) for m in (1, 16, 256, 4096)]
    recs += [{"kernel": "copy_h2d", "num_bytes": b, "pinned": True, "time_s": 1e-5 + b / 2e10}
             for b in (1 << 16, 1 << 20, 1 << 24, 1 << 28)]
    recs += [{"kernel": "step", "num_seqs": s, "vocab_size": 32000, "time_s": 1e-4 + s * 1e-7} for s in (1, 8, 64)]
    return [device, *recs]


FIELDS = ["kernel", "time_s", "m", "n", "k", "dtype", "num_bytes", "pinned", "num_seqs", "vocab_size", "record",
          "name", "gpu_name", "memory_bytes", "provenance", "idle_s", "x"]
JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
    st.sampled_from(["gemm", "step", "forward", "copy_h2d", "device", "fp16", "bf16", "fp64", 0, 1e-300, 1e308, 5e-324]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
RAW_LINES = st.one_of(
    st.binary(max_size=20), st.text(max_size=20).map(str.encode),
    st.sampled_from([b"{", b"1", b"[]", b"null", b'"x"', b"{}", b"\xff\xfe", b"#comment", b"", b"   ",
                     b'{"kernel": "gemm", "m": ' + b"9" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000,
                     b'{"kernel": "gemm", "time_s": NaN}', b'{"kernel": "step", "time_s": -Infinity}']))
MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 30), st.sampled_from(FIELDS), JSON_VALUES),
    st.tuples(st.just("delete"), st.integers(0, 30), st.sampled_from(FIELDS)),
    st.tuples(st.just("drop"), st.integers(0, 30)),
    st.tuples(st.just("duplicate"), st.integers(0, 30)),
    st.tuples(st.just("scale"), st.integers(0, 30), st.floats(1e-6, 1e6)),
    st.tuples(st.just("truncate"), st.integers(0, 30), st.integers(0, 80)),
    st.tuples(st.just("raw"), st.integers(0, 30), RAW_LINES),
)


def mutate(mutations) -> bytes:
    lines: list = valid_lines()
    for op, i, *rest in mutations:
        i %= len(lines) or 1
        if not lines:
            lines.append(b"")
        line = lines[i]
        if op == "set" and isinstance(line, dict):
            line[rest[0]] = rest[1]
        elif op == "delete" and isinstance(line, dict):
            line.pop(rest[0], None)
        elif op == "drop":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, json.loads(json.dumps(line)) if isinstance(line, dict) else line)
        elif op == "scale" and isinstance(line, dict) and isinstance(line.get("time_s"), float):
            line["time_s"] *= rest[0]
        elif op == "truncate":
            text = json.dumps(line).encode() if isinstance(line, dict) else line
            lines[i] = text[: rest[0]]
        elif op == "raw":
            lines[i] = rest[0]
    return b"\n".join(json.dumps(x).encode() if isinstance(x, dict) else x for x in lines) + b"\n"


def test_fit_survives_mutated_measurements(tmp_path: Path) -> None:
    seen: Counter = Counter()
    src, out = tmp_path / "m.jsonl", tmp_path / "cal.yaml"

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(MUTATION, min_size=1, max_size=4))
    def run(mutations) -> None:
        src.write_bytes(mutate(mutations))
        out.unlink(missing_ok=True)
        err, std = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            rc = main(["fit", str(src), "-o", str(out), "--folds", "3"])
        lines = err.getvalue().splitlines()
        seen[rc] += 1
        if rc == 2:
            assert len(lines) == 1 and lines[0].startswith("error: "), lines
        else:
            assert rc == 0 and all(line.startswith("WARNING: ") for line in lines), (rc, lines)
            load_calibration(str(out))  # what was written loads back

    run()
    total = sum(seen.values())
    print(f"\nfuzzed microbench fit with {total} mutated JSONL files: {seen[0]} fitted, {seen[2]} refused")
    assert total >= min(EXAMPLES, 20) and set(seen) <= {0, 2}

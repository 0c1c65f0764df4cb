"""Shared helpers of the bad-input fuzz suite: run the real CLI in-process and check the
bad-input promise (docs/reference/commands.md, "Bad input": exit 0, or exit 2 with exactly one ``error: <file>: <key>: ...``
line on stderr; never a traceback, never NaN or Infinity in summary.json)."""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path

import yaml

from sim.cli.main import main

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"

#: cases tried per input kind in this session (printed at the end by conftest.py)
COUNTS: collections.Counter = collections.Counter()
#: outcomes per input kind: "ok" (exit 0) or "error" (exit 2)
OUTCOMES: collections.Counter = collections.Counter()

#: A tiny, fast, valid scenario (tiny-llama, 64 blocks, a handful of requests).
TINY = {
    "name": "fuzz", "seed": 1, "model": "tiny-llama", "gpu": "a100-80gb",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 64},
    "kv": {"allocator": "paged", "block_size": 16},
    "workload": {"num_requests": 4, "arrival": {"type": "poisson", "rate": 20.0},
                 "prompt_tokens": {"type": "uniform", "low": 8, "high": 64},
                 "output_tokens": {"type": "fixed", "value": 8}},
}


def write_yaml(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _reject_constant(name: str):
    raise AssertionError(f"summary.json holds {name}")


def run_cli(capsys, argv: list[str], kind: str, out_dir: Path | None = None) -> tuple[int, str]:
    """Run ``sim`` in-process; return (exit status, stderr). Checks the promise's shape:
    status 0 or 2; on 2 exactly one stderr line ``error: ...``; never a traceback."""
    COUNTS[kind] += 1
    capsys.readouterr()  # drop whatever an earlier example left
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse and friends
        code = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-2000:]
    assert code in (0, 2), f"exit {code}: {err[-2000:]}"
    if code == 2:
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
        parts = lines[0][len("error: "):].split(": ", 2)
        assert len(parts) == 3 and all(p.strip() for p in parts), lines[0]
        OUTCOMES[(kind, "error")] += 1
    else:
        OUTCOMES[(kind, "ok")] += 1
        if out_dir is not None and (out_dir / "summary.json").exists():
            summary = json.loads((out_dir / "summary.json").read_text(), parse_constant=_reject_constant)
            _check_finite(summary)
    return code, err


def _check_finite(node, path="summary") -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _check_finite(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_finite(v, f"{path}[{i}]")
    elif isinstance(node, float):
        assert math.isfinite(node), f"{path} = {node}"


def error_parts(err: str) -> tuple[str, str, str]:
    """(file, key, message) of the one error line."""
    file, key, message = err.strip()[len("error: "):].split(": ", 2)
    return file, key, message


def run_args(scenario: Path, out: Path, *extra: str) -> list[str]:
    return ["run", str(scenario), "--out", str(out), "--no-report", "--quiet", *extra]

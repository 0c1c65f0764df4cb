"""benchmarks/kernels_gpu.py --dry-run runs end to end on CPU (interpreter) and exits 0."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_exits_zero_and_writes_json(tmp_path):
    out = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the script must set it itself
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernels_gpu.py"), "--dry-run", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["dry_run"] is True
    assert results["checks"] and all(c["ok"] for c in results["checks"])
    names = " ".join(r["name"] for r in results["results"])
    for kernel in ("decode", "decode_gemv", "prefill", "gather_blocks", "scatter_blocks", "write_kv_cache"):
        assert kernel in names

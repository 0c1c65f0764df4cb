"""benchmarks/gpu_session.sh with DRY_RUN=1: every stage of the one-call GPU session runs on the
CPU with tiny sizes and exits 0, so a lent GPU's minutes are never lost to a broken command."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("kernels_gpu", "calibrate", "gemm_models", "validate")


def test_every_stage_runs_and_exits_zero(tmp_path):
    out = tmp_path / "out"
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
           "DRY_RUN": "1", "OUT": str(out), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=2400)  # the dry run's 4x stage limits
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    status = (out / "status.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in status] == list(STAGES)
    assert all(": exit 0" in line for line in status), status
    assert "gemm_models: exit 0 (8 timings)" in status
    assert json.loads((out / "kernels.json").read_text())["dry_run"] is True
    assert (out / "calibration.yaml").is_file() and (out / "validate" / "validation.json").is_file()
    assert json.loads((out / "linear_layers.csv.device.json").read_text())["complete"] is True

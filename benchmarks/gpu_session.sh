#!/usr/bin/env bash
# Everything a session with a lent GPU runs, in one call of well under 10 minutes:
#   1. kernels against their references on realistic shapes, then timed (kernels_gpu.py)
#   2. microbench calibrate --gpu 0 --quick (Llama-3-8B shapes) -> $OUT/calibration.yaml; its
#      interconnect step times NCCL all-reduce/all-gather/send-recv when 2+ GPUs are visible
#      (-> $OUT/calibration.interconnect.jsonl), and on one GPU says so and keeps the datasheet's
#   3. the eight reference models' linear layers timed with cuBLAS in this one session
#      (gemm_models_gpu.py, 90 s of measuring) -> $OUT/linear_layers.csv (+ .device.json); the
#      held-out-model analysis runs afterwards on the dev machine:
#      python benchmarks/gemm_models_gpu.py --analyze <files>/linear_layers.csv
#   4. sim validate on the GPU with that calibration -> $OUT/validate/
# Prepare on the dev machine: bash benchmarks/gpu_wheels.sh; then run this on the device
# with carry [".gpu-wheels"]. Each stage has its own time limit and the next one runs
# even if it fails; the summary table is printed last. Results land in $OUT.
# DRY_RUN=1 runs every stage on the CPU with tiny sizes (the tests do): it checks the
# commands and their flags, so a lent GPU's minutes are not lost to a typo; no numbers.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/kvsim-gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
X=1  # stage time limits: the device's 10 minutes; a CPU dry run on a shared machine gets 4x (tests only)
if [ -n "${DRY_RUN:-}" ]; then
    X=4
    KERNELS=(--dry-run); CALIBRATE=(--device cpu --quick); GEMMS=(--device cpu --models microsoft/phi-2 --m 1,2)
    VALIDATE=(scenarios/validate-cpu.yaml --device cpu --no-warmup --no-drift-check --set workload.num_requests=4)
else
    KERNELS=(); CALIBRATE=(--gpu 0 --quick); GEMMS=(--device cuda:0)
    VALIDATE=(scenarios/validate-gpu.yaml --device cuda:0)
    $PY -m pip install -q --no-index --find-links .gpu-wheels --target .gpu-site simpy pydantic plotly \
        > "$OUT/pip.txt" 2>&1 || echo "pip install from .gpu-wheels failed: see pip.txt"
fi
export PYTHONPATH="$PWD:$PWD/.gpu-site${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi; $PY -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"; } \
    > "$OUT/device.txt" 2>&1
timeout $((110 * X)) $PY benchmarks/kernels_gpu.py "${KERNELS[@]}" --json "$OUT/kernels.json" > "$OUT/kernels.txt" 2>&1
echo "kernels_gpu: exit $?" >> "$OUT/status.txt"
timeout $((180 * X)) $PY -m microbench.cli calibrate "${CALIBRATE[@]}" --no-progress \
    --out "$OUT/calibration.yaml" > "$OUT/calibrate.txt" 2>&1
echo "calibrate: exit $?" >> "$OUT/status.txt"
{ grep -m1 "^interconnect:" "$OUT/calibrate.txt" || echo "no interconnect line in calibrate.txt"
  $PY -c "import sys, yaml; print('interconnect section:', (yaml.safe_load(open(sys.argv[1])) or {}).get('interconnect'))" \
      "$OUT/calibration.yaml"; } > "$OUT/interconnect.txt" 2>&1
timeout $((110 * X)) $PY benchmarks/gemm_models_gpu.py "${GEMMS[@]}" --out "$OUT/linear_layers.csv" --budget-s 90 --no-analysis \
    > "$OUT/gemm_models.txt" 2>&1
echo "gemm_models: exit $? ($(($(wc -l < "$OUT/linear_layers.csv" 2>/dev/null || echo 1) - 1)) timings)" >> "$OUT/status.txt"
CAL="$OUT/calibration.yaml"; [ -f "$CAL" ] || CAL=h200
timeout $((130 * X)) $PY -m sim.cli validate "${VALIDATE[@]}" \
    --calibration "$CAL" --out "$OUT/validate" --force > "$OUT/validate.txt" 2>&1
echo "validate: exit $?" >> "$OUT/status.txt"
cat "$OUT/device.txt" | head -20; tail -25 "$OUT/kernels.txt"; tail -15 "$OUT/calibrate.txt"
cat "$OUT/interconnect.txt"; tail -3 "$OUT/gemm_models.txt"; tail -20 "$OUT/validate.txt"; cat "$OUT/status.txt"

#!/usr/bin/env bash
# Download, on the dev machine, the wheels the lent GPU machine lacks (it reaches no
# registry; its python3 is 3.12 with torch, triton, numpy, scipy, pyyaml, rich already).
# Then pass `carry: [".gpu-wheels"]` to the device tool and run benchmarks/gpu_session.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-wheels && mkdir -p .gpu-wheels
pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d .gpu-wheels simpy "pydantic>=2.5" "plotly>=5.18"
du -sh .gpu-wheels

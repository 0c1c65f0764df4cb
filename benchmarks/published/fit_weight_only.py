"""Fit the weight-only int4 efficiency of a torch.compile decoder's kernel (tinygemm).

gpt-fast and torchao run int4 weight-only linears with PyTorch's tinygemm kernel
(``aten._weight_int4pack_mm``). The ``compiled`` engine profile (sim/cost/profile.py,
``_TINYGEMM_INT4``) charges its weights at a fraction of a bf16 GEMM's bandwidth; this script
fits that fraction on torchao's published batch-1 table, a source outside the published suite
(whose gpt-fast int4 cases then check it):

    pytorch/ao, torchao/quantization/README.md, 'Benchmarks', tables 'CUDA backend |
    NVIDIA-A100-80GB GPU' and 'CUDA backend | NVIDIA-H100 GPU' (generate.py, batch 1,
    torch.compile, 200 new tokens from a short prompt):
      A100-80GB  Llama-2-7B    Base (bfloat16) 107.38 tok/s   int4wo-64 201.14 tok/s
      A100-80GB  Llama-3-8B    Base (bfloat16)  95.64 tok/s   int4wo-64 180.80 tok/s
      H100       Llama-3.1-8B  Base (bfloat16) 126.90 tok/s   int4wo-64 241.39 tok/s

It scores each candidate efficiency by the mean |log(simulated / published)| over the three
int4 rows and prints the bf16 rows' errors beside them (the part of the error that is not the
kernel's). The H100 row is the H100 SXM calibration (the README does not say which H100).

    python benchmarks/published/fit_weight_only.py
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.config.scenario import parse_scenario  # noqa: E402
from sim.cost import profile as prof  # noqa: E402
from sim.engine.logs.metrics import summarize  # noqa: E402
from sim.engine.simulation import Simulation  # noqa: E402

ROWS = [  # (gpu, model, bf16 tok/s, int4wo-64 tok/s)
    ("a100-80gb", "llama-2-7b", 107.38, 201.14),
    ("a100-80gb", "llama-3-8b", 95.64, 180.80),
    ("h100-sxm", "llama-3.1-8b", 126.90, 241.39),
]
GRID = [round(0.30 + 0.01 * i, 2) for i in range(61)]  # 0.30 .. 0.90


def decode_tok_s(gpu: str, model: str, weight_dtype: str) -> float:
    sc = parse_scenario({
        "name": f"torchao-{model}-{gpu}-{weight_dtype}", "model": model, "gpu": gpu,
        "engine": {"profile": "compiled", "weight_dtype": weight_dtype, "kv_dtype": "bf16",
                   "max_model_len": 1024},
        "kv": {"allocator": "paged", "block_size": 16},
        "scheduler": {"policy": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": 1024},
        "workload": {"num_requests": 3, "arrival": {"type": "constant", "rate": 0.05},
                     "prompt_tokens": {"type": "fixed", "value": 5},
                     "output_tokens": {"type": "fixed", "value": 200}},
    }, "<fit_weight_only>")
    return 1.0 / summarize(Simulation(sc).run())["tpot_s"]["mean"]


def with_int4(eff: float) -> None:
    compiled = prof.PROFILES[prof.ProfileName.COMPILED]
    prof.PROFILES[prof.ProfileName.COMPILED] = dataclasses.replace(
        compiled, weight_only_kernels=(("int4", eff),))


def main() -> None:
    original = prof.PROFILES[prof.ProfileName.COMPILED]
    try:
        for gpu, model, bf16, _ in ROWS:
            sim = decode_tok_s(gpu, model, "bf16")
            print(f"bf16  {gpu:10s} {model:13s} published {bf16:7.2f}  kvsim {sim:7.2f}  {sim / bf16 - 1:+.1%}")
        best = None
        for eff in GRID:
            with_int4(eff)
            errs = [math.log(decode_tok_s(g, m, "int4") / pub) for g, m, _, pub in ROWS]
            score = sum(abs(e) for e in errs) / len(errs)
            if best is None or score < best[0]:
                best = (score, eff, errs)
        score, eff, errs = best
        print(f"int4 efficiency {eff:.2f}: mean |log error| {score:.3f}; per row "
              + ", ".join(f"{math.exp(e) - 1:+.1%}" for e in errs))
    finally:
        prof.PROFILES[prof.ProfileName.COMPILED] = original


if __name__ == "__main__":
    main()

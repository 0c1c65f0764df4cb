"""The validation engine on the Triton kernels (the GPU path), run through the interpreter.

On CUDA ``sim validate`` runs the model's attention and KV writes, and gathered swaps,
through ``kernels/``. No GPU here: the same code path runs on CPU tensors under
TRITON_INTERPRET (set by this directory's conftest), and every step's attention is
checked against a dense recomputation of each sequence.
"""

from __future__ import annotations

import json

import pytest
import torch

from sim.engine.simulation import Simulation
from sim.config.scenario import parse_scenario
from realengine.executor import StepExecutor, attention_mismatches
from realengine.model import TinyLlama, TritonBackend

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 512}


def scenario(tmp_path, transfer: str) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return {
        "name": "triton-engine", "seed": 5, "model": str(tmp_path / "config.json"), "gpu": "a100-80gb",
        "engine": {"profile": "eager", "max_model_len": 128, "num_gpu_blocks_override": 9},
        "kv": {"allocator": "paged", "block_size": 16, "swap_transfer": transfer},
        "scheduler": {"policy": "chunked-prefill", "max_num_batched_tokens": 32, "max_num_seqs": 4,
                      "preemption": "swap"},
        "workload": {"num_requests": 4, "arrival": {"type": "poisson", "rate": 500.0},
                     "prompt_tokens": {"type": "uniform", "low": 20, "high": 40},
                     "output_tokens": {"type": "uniform", "low": 10, "high": 14}},
    }


@pytest.mark.parametrize("transfer", ["per-block", "gathered"])
def test_triton_engine_matches_dense_attention_through_swaps(tmp_path, transfer) -> None:
    sc = parse_scenario(scenario(tmp_path, transfer), str(tmp_path / "s.yaml"))
    state = {"steps": 0}

    def hook(out) -> None:
        state["ex"].swaps(out)
        if out.scheduled:
            _, kept = model.forward(state["ex"].pack(out), keep_attention=True)
            rows, bad = attention_mismatches(model, out, kept)
            assert rows == out.num_tokens and bad == [], f"step {state['steps']}: {bad}"
            state["steps"] += 1

    sim = Simulation(sc, step_hook=hook)
    model = TinyLlama(sim.model, num_blocks=sim.plan.num_gpu_blocks, block_size=16, device=torch.device("cpu"),
                      dtype=torch.float32, seed=1, backend="triton")
    assert isinstance(model.backend, TritonBackend)
    state["ex"] = StepExecutor(model, sim.allocator, 16, sc.kv.swap_transfer)
    result = sim.run()
    assert state["steps"] > 10
    assert sum(r.num_swaps for r in result.requests) > 0 and state["ex"].num_host_copies > 0
    assert all(req.num_generated == req.num_output_tokens for req in result.requests)


def test_unknown_backend_is_refused(tmp_path) -> None:
    from sim.model.hf_config import load_model

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(ValueError, match="backend"):
        TinyLlama(load_model(str(tmp_path / "config.json")), num_blocks=2, block_size=16,
                  device=torch.device("cpu"), dtype=torch.float32, backend="cudnn")

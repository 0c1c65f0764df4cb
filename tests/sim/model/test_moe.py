"""MoE layouts: Mixtral, Qwen2-MoE / Qwen3-MoE, DeepSeek; total and active parameters."""

from __future__ import annotations

from pathlib import Path

from sim.model.hf_config import load_model, spec_from_hf_config
from sim.model.spec import flops_per_token, linear_ops

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_qwen2_moe_shared_expert_and_gate() -> None:
    m = load_model(str(FIXTURES / "qwen1.5-moe-a2.7b.config.json"))  # Qwen/Qwen1.5-MoE-A2.7B
    h, expert = 2048, 3 * 2048 * 1408
    shared = 3 * h * 5632
    attn = 4 * h * h + 3 * h  # q, k, v, o and the qkv bias
    layer = attn + 60 * expert + shared + h + h * 60 + 2 * h  # + shared gate, router, two norms
    assert m.num_params == 24 * layer + 2 * 151936 * h + h == 14_315_784_192  # published 14.3B
    assert m.num_active_params == m.num_params - 24 * 56 * expert == 2_689_173_504  # published 2.7B
    ops = {op.name: op for op in linear_ops(m)}
    assert ops["shared_gate_up"].n == 2 * 5632 and ops["shared_down"].k == 5632
    assert ops["experts_down"].num_experts == 60 and ops["experts_down"].experts_per_tok == 4
    assert m.num_shared_experts == 4  # 5632 / 1408 expert widths, for the activation estimate


def test_qwen3_moe_all_layers_routed() -> None:
    m = load_model("qwen3-30b-a3b")
    assert m.num_moe_layers == 48 and m.num_dense_mlp_layers == 0
    assert "gate_up" not in {op.name for op in linear_ops(m)}
    # a step's weight reads and FLOPs use the routed top-k, not all 128 experts
    dense_equivalent = 2 * m.num_active_params - 2 * 151936 * 2048  # less the input embedding
    assert flops_per_token(m) < dense_equivalent < 2 * m.num_params / 5


def test_decoder_sparse_step_and_mlp_only_layers() -> None:
    cfg = {"model_type": "qwen3_moe", "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "num_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    m = spec_from_hf_config(cfg, name="t", source="t.json")
    assert m.moe_layer_indices == (1, 5) and m.num_moe_layers == 2 and m.num_dense_mlp_layers == 4
    none_left = spec_from_hf_config({**cfg, "mlp_only_layers": [1, 3, 5]}, name="t", source="t.json")
    assert not none_left.is_moe and none_left.num_active_params == none_left.num_params


def test_deepseek_v3_dense_then_moe_layers() -> None:
    m = load_model("deepseek-v3")
    assert m.num_dense_mlp_layers == 3 and m.num_moe_layers == 58 and m.is_mla
    assert m.num_shared_experts == 1 and m.shared_intermediate_size == 2048 and m.router_bias
    expert = 3 * 7168 * 2048
    assert m.num_params - m.num_active_params == 58 * (256 - 8) * expert


def test_mixtral_every_layer_eight_experts() -> None:
    m = load_model("mixtral-8x7b")
    assert m.num_moe_layers == 32 and m.moe_intermediate_size == 14336 and m.shared_intermediate_size == 0
    assert m.num_params - m.num_active_params == 32 * 6 * 3 * 4096 * 14336

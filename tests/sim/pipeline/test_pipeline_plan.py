"""Pipeline parallelism's layer split and per-GPU memory plan (sim/model/parallel.py, memory.py)."""

from __future__ import annotations

import pytest

from sim.errors import ConfigError
from sim.model.hf_config import load_model
from sim.model.memory import plan_memory
from sim.model.parallel import (
    check_pipeline_parallel, embedding_params, shard_model, stage_layers, stage_models, stage_weight_bytes)
from sim.model.spec import kv_bytes_per_token
from sim.model.weights import weight_bytes

GIB = 1 << 30


@pytest.mark.parametrize(("layers", "pp", "split"), [
    (80, 8, (10,) * 8),
    (32, 2, (16, 16)),
    (61, 8, (7, 7, 8, 8, 8, 8, 8, 7)),  # remainder 5: stages 6, 5, 4, 3, 2 get one more
    (10, 4, (2, 3, 3, 2)),  # remainder 2 <= pp - 2: the middle stages
    (11, 4, (3, 3, 3, 2)),  # remainder 3 = pp - 1: every stage but the last
    (2, 2, (1, 1)),
])
def test_stage_layers_is_vllms_default_split(layers: int, pp: int, split: tuple) -> None:
    assert stage_layers(layers, pp) == split
    assert sum(split) == layers and split[-1] == min(split)


def test_stage_models_keep_moe_layers_and_windows_in_place() -> None:
    ds = load_model("deepseek-v3")  # 61 layers, the first 3 dense
    stages = stage_models(ds, 8)
    assert [s.num_layers for s in stages] == list(stage_layers(61, 8))
    assert sum(s.num_moe_layers for s in stages) == ds.num_moe_layers
    assert stages[0].num_moe_layers == stages[0].num_layers - 3
    gemma = load_model("gemma-2-9b")  # alternating sliding and full layers
    windows = [w for s in stage_models(gemma, 4) for w in s.layer_windows]
    assert tuple(windows) == gemma.layer_windows


@pytest.mark.parametrize(("model", "pp", "fragment"), [
    ("llama-3-8b", 3, "allowed: 1, 2, 4, 8"),
    ("tiny-llama", 4, "2 layers: every stage needs a layer; allowed for this model: 1, 2"),
])
def test_bad_pp_is_one_error_naming_the_key(model: str, pp: int, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_pipeline_parallel(load_model(model), pp, "s.yaml")
    assert err.value.key == "engine.pipeline_parallel_size" and fragment in err.value.message


def test_pp_1_plan_is_todays_plan() -> None:
    model = load_model("llama-3-70b")
    kwargs = dict(max_model_len=8192, tensor_parallel_size=4)
    assert plan_memory(model, 80 * GIB, **kwargs) == plan_memory(model, 80 * GIB, pipeline_parallel_size=1, **kwargs)


def test_pp_2_halves_the_weights_per_gpu() -> None:
    model = load_model("llama-3-8b")  # untied: embedding and lm_head alike
    one = plan_memory(model, 80 * GIB, max_model_len=8192)
    two = plan_memory(model, 80 * GIB, max_model_len=8192, pipeline_parallel_size=2)
    assert sum(st.weight_bytes for st in two.stages) == one.weight_bytes  # nothing held twice
    assert [st.weight_bytes for st in two.stages] == [pytest.approx(one.weight_bytes / 2, rel=1e-5)] * 2
    assert [st.bytes_per_token for st in two.stages] == [one.bytes_per_token // 2] * 2
    # the sampler's logits are on the last stage only, so it has the least room: it binds
    assert two.stages[1].activation_peak_bytes > two.stages[0].activation_peak_bytes
    assert two.num_gpu_blocks == min(st.num_gpu_blocks for st in two.stages) == two.stages[1].num_gpu_blocks
    assert two.num_gpu_blocks > 2 * one.num_gpu_blocks  # half the KV per token per GPU, more room


def test_stage_weights_hold_the_embedding_first_and_the_lm_head_last() -> None:
    model = shard_model(load_model("llama-3-70b"), 2)
    embed, head = embedding_params(model)
    stages = [shard_model(s, 2) for s in stage_models(load_model("llama-3-70b"), 4)]
    sizes = [stage_weight_bytes(s, i, 4, 1, 1) for i, s in enumerate(stages)]
    norm = model.hidden_size
    layers_only = [s.num_params - embed - head - norm for s in stages]
    assert sizes == [layers_only[0] + embed, layers_only[1], layers_only[2], layers_only[3] + head + norm]
    assert sum(sizes) == weight_bytes(model, 1, 1)  # every parameter on exactly one stage
    # fp8 layers: the embedding table and the lm_head stay 16-bit, on their stages only
    fp8 = [stage_weight_bytes(s, i, 4, 1) for i, s in enumerate(stages)]
    assert fp8 == [sizes[0] + embed, sizes[1], sizes[2], sizes[3] + head] and sum(fp8) == weight_bytes(model, 1)
    tied = load_model("gemma-2-9b")  # tied embeddings: the last stage keeps its own copy as the lm_head
    t_embed, t_head = embedding_params(tied)
    assert t_head == 0
    t_sizes = [stage_weight_bytes(s, i, 2, 1, 1) for i, s in enumerate(stage_models(tied, 2))]
    assert sum(t_sizes) == weight_bytes(tied, 1, 1) + t_embed


def test_70b_tp4_pp2_per_gpu_plan() -> None:
    model = load_model("llama-3-70b")
    plan = plan_memory(model, 80 * GIB, max_model_len=8192, tensor_parallel_size=4, pipeline_parallel_size=2)
    assert plan.pipeline_parallel_size == 2 and [st.layers for st in plan.stages] == [40, 40]
    per_token = kv_bytes_per_token(shard_model(stage_models(model, 2)[0], 4), "bf16")
    assert plan.bytes_per_token == per_token == kv_bytes_per_token(model, "bf16") // 8
    tp8 = plan_memory(model, 80 * GIB, max_model_len=8192, tensor_parallel_size=8)
    assert plan.weight_bytes == pytest.approx(tp8.weight_bytes, rel=0.01)  # 1/8 of the weights either way

"""Attention data parallelism (engine.attention_data_parallel) and decode attention's math."""

from __future__ import annotations

import dataclasses
import random

import pytest

from sim.calib.calibration import load_calibration
from sim.config.scenario import parse_scenario
from sim.cost.build import build_cost_model
from sim.cost.shape import BatchShape
from sim.engine import parts
from sim.errors import ConfigError
from sim.model.hf_config import load_model
from sim.model.memory import check_fits_one_sequence, plan_memory
from sim.model.parallel import shard_model
from sim.model.spec import attn_flops_per_pair, decode_attn_flops_per_pair, kv_bytes_per_token

GIB = 1 << 30


def plans(model: str, gpu_gib: float = 141, **kw):
    m = load_model(model)
    args = dict(max_model_len=8192, tensor_parallel_size=8, weight_dtype_bytes=1, **kw)
    return m, plan_memory(m, int(gpu_gib * GIB), **args), plan_memory(m, int(gpu_gib * GIB), attention_data_parallel=True,
                                                                       **args)


def test_an_mla_model_holds_its_latent_once_per_token_across_the_gpus() -> None:
    model, tp, dp = plans("deepseek-v3")
    assert dp.attention_ranks == 8 and tp.attention_ranks == 1
    assert dp.bytes_per_token == tp.bytes_per_token == kv_bytes_per_token(model, "bf16")  # the latent, whole
    assert dp.weight_bytes > tp.weight_bytes  # every GPU keeps all the attention weights
    per_gpu = dp.kv_pool_bytes // dp.bytes_per_block
    assert dp.num_gpu_blocks == 8 * per_gpu and dp.blocks_per_rank == per_gpu
    # 8 GPUs' room for whole latents where tp repeats every latent on every GPU, less the attention weights
    assert dp.num_gpu_blocks / tp.num_gpu_blocks == pytest.approx(8 * dp.kv_pool_bytes / tp.kv_pool_bytes, rel=1e-3)
    assert dp.num_gpu_blocks > 5 * tp.num_gpu_blocks
    assert dp.max_full_length_seqs == 8 * (per_gpu // dp.blocks_per_full_seq)


def test_a_gqa_model_gains_no_room_and_pays_the_replicated_attention() -> None:
    model, tp, dp = plans("llama-3.1-70b", gpu_gib=80)
    assert dp.bytes_per_token == 8 * tp.bytes_per_token  # all 8 KV heads of a token on its GPU
    assert dp.weight_bytes > tp.weight_bytes and dp.pool_tokens < tp.pool_tokens


def test_one_sequence_must_fit_one_gpu() -> None:
    model = load_model("llama-3.1-8b")
    plan = plan_memory(model, 80 * GIB, max_model_len=8192, tensor_parallel_size=4, attention_data_parallel=True,
                       num_gpu_blocks_override=4 * 600)
    check_fits_one_sequence(plan, 600 * 16)
    with pytest.raises(ConfigError) as err:
        check_fits_one_sequence(plan, 600 * 16 + 1)  # fits all four GPUs' pools, not one
    assert "one attention rank's pool has 600" in err.value.message


def test_the_scenario_key_needs_tensor_parallelism_and_a_datasheet(scenario_dict) -> None:
    def build(**engine):
        data = scenario_dict(model="llama-3.1-8b", engine={"num_gpu_blocks_override": None, **engine})
        return parts.build_plan(parse_scenario(data, "/tmp/kvsim-test/s.yaml"))
    assert build(tensor_parallel_size=2, attention_data_parallel=True)[2].attention_ranks == 2
    for engine in ({"attention_data_parallel": True},
                   {"attention_data_parallel": True, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
                   {"attention_data_parallel": True, "tensor_parallel_size": 2, "gpu": "cpu-epyc-2core"}):
        gpu = engine.pop("gpu", None)
        data = scenario_dict(model="llama-3.1-8b", engine={"num_gpu_blocks_override": None, **engine},
                             **({"gpu": gpu} if gpu else {}))
        with pytest.raises(ConfigError) as err:
            parts.build_plan(parse_scenario(data, "/tmp/kvsim-test/s.yaml"))
        assert err.value.key == "engine.attention_data_parallel"


def cost(model: str, dp: bool, gpu: str = "h200", tp: int = 8):
    return build_cost_model(load_model(model), load_calibration(gpu), "fp8", 1, weight_dtype="fp8",
                            tensor_parallel_size=tp, attention_data_parallel=dp)


def test_each_gpu_attends_over_its_share_of_the_requests() -> None:
    tp, dp = cost("llama-3.1-70b", False), cost("llama-3.1-70b", True)
    assert dp.attention_ranks == 8 and dp.attention_ops == 2  # qkv and o
    one = BatchShape(1, 0, 1, 4096, 0.0, 0, 0)
    assert dp.step_time_s(one) > tp.step_time_s(one)  # one request: its GPU reads all the attention weights
    many, more = BatchShape(512, 0, 512, 512 * 4096, 0.0, 0, 0), BatchShape(512, 0, 512, 2 * 512 * 4096, 0.0, 0, 0)
    # the KV a step reads: each GPU its own requests' whole tokens, as tp reads every token's 1/8
    assert dp.step_time_s(more) - dp.step_time_s(many) == pytest.approx(tp.step_time_s(more) - tp.step_time_s(many))


def test_mla_decode_is_bound_by_its_math_under_attention_data_parallelism() -> None:
    model = load_model("deepseek-v3")
    assert decode_attn_flops_per_pair(model) > 3 * attn_flops_per_pair(model)  # absorbed: the latent is K and V
    dp, tp = cost("deepseek-v3", True), cost("deepseek-v3", False)
    shard = shard_model(model, 8, attention_dp=True)
    a = decode_attn_flops_per_pair(shard) / (load_calibration("h200").peak_flops * load_calibration("h200").compute_eff_max)
    assert dp.decode_attn_s_per_pair == pytest.approx(a)
    kv = 256 * 8192
    base, double = BatchShape(256, 0, 256, kv, 0.0, 0, 0), BatchShape(256, 0, 256, 2 * kv, 0.0, 0, 0)
    assert dp.step_time_s(double) - dp.step_time_s(base) == pytest.approx(kv * a / 8)  # the math, not the reads
    assert tp.step_time_s(double) - tp.step_time_s(base) == pytest.approx(kv * tp.kv_read_s_per_token)  # reads bind


@pytest.mark.parametrize(("model", "dp"), [("llama-3.1-8b", False), ("llama-3.1-70b", True), ("deepseek-v3", True),
                                           ("deepseek-v3", False), ("qwen3-30b-a3b", True)])
def test_decode_time_fn_gives_step_time_s_floats(model: str, dp: bool) -> None:
    cm = cost(model, dp)
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 512)
        kv = rng.randint(n, 40_000 * n)
        assert cm.decode_time_fn(n, n)(kv) == cm.step_time_s(BatchShape(n, 0, n, kv, 0.0, 0, 0))


def test_gqa_decode_is_read_bound_so_the_math_term_changes_nothing() -> None:
    cm = cost("llama-3.1-70b", False, gpu="h100-sxm", tp=2)
    plain = dataclasses.replace(cm, decode_attn_s_per_pair=0.0)
    rng = random.Random(1)
    for _ in range(300):
        shape = BatchShape(rng.randint(1, 256), rng.randint(0, 4096), rng.randint(0, 256), rng.randint(0, 10**6),
                           rng.random() * 1e7, rng.randint(0, 10**5), rng.randint(0, 8))
        assert cm.step_time_s(shape) == plain.step_time_s(shape)

"""The ``lmdeploy`` profile (LMDeploy's TurboMind): the defaults it fills in and how it times a step."""

from __future__ import annotations

from sim.config.scenario import parse_scenario
from sim.cost.profile import PROFILES, GraphMode, ProfileName

BASE = {"model": "llama-2-7b", "gpu": "a100-80gb",
        "workload": {"num_requests": 4, "arrival": {"type": "offline"},
                     "prompt_tokens": {"type": "fixed", "value": 64}, "output_tokens": {"type": "fixed", "value": 8}}}


def _scenario(engine: dict, kv: dict | None = None, scheduler: dict | None = None):
    data = {**BASE, "engine": {"max_model_len": 4096, **engine}}
    if kv is not None:
        data["kv"] = kv
    if scheduler is not None:
        data["scheduler"] = scheduler
    return parse_scenario(data, "lmdeploy-test.yaml")


def test_turbomind_defaults_fill_the_unset_keys() -> None:
    sc = _scenario({"profile": "lmdeploy"})
    assert sc.kv.block_size == 64  # cache_block_seq_len
    assert sc.engine.kv_cache_free_gpu_mem_fraction == 0.8  # cache_max_entry_count, of the free memory
    assert sc.scheduler.policy == "chunked-prefill"  # prompts split at max_prefill_token_num
    assert sc.kv.prefix_caching is False  # enable_prefix_caching off by default
    assert {"kv.block_size", "engine.kv_cache_free_gpu_mem_fraction", "scheduler.policy"} <= set(sc.profile_defaults)


def test_keys_set_in_the_file_win() -> None:
    sc = _scenario({"profile": "lmdeploy", "kv_cache_free_gpu_mem_fraction": 0.5},
                   kv={"block_size": 128, "prefix_caching": True}, scheduler={"policy": "continuous"})
    assert (sc.kv.block_size, sc.engine.kv_cache_free_gpu_mem_fraction) == (128, 0.5)
    assert sc.kv.prefix_caching is True and sc.scheduler.policy == "continuous"
    assert "kv.block_size" not in sc.profile_defaults


def test_other_profiles_keep_their_defaults() -> None:
    for name in ("vllm-v1", "sglang", "trtllm"):
        sc = _scenario({"profile": name})
        assert sc.kv.block_size == 16 and sc.engine.kv_cache_free_gpu_mem_fraction is None
        assert "kv.block_size" not in sc.profile_defaults


def test_every_batch_size_runs_unpadded() -> None:
    p = PROFILES[ProfileName.LMDEPLOY]
    assert p.graph_mode is GraphMode.DECODE and not p.pads_to_captured
    assert p.capture_sizes(48) == tuple(range(1, 49))
    assert PROFILES[ProfileName.VLLM_V1].capture_sizes(48)[:4] == (1, 2, 4, 8)  # vLLM still pads


def test_synchronous_cpp_loop_and_nccl_all_reduces() -> None:
    p = PROFILES[ProfileName.LMDEPLOY]
    assert not p.async_scheduling and p.step_host_s > 0 and p.custom_allreduce_bytes == ()


def test_the_pool_is_a_share_of_the_free_memory() -> None:
    """0.8 of what the weights leave: more KV than vLLM's 0.9 of the whole GPU where the weights are large."""
    from sim.engine.parts import build_plan

    lm = build_plan(_scenario({"profile": "lmdeploy", "weight_dtype": "fp16"}, scheduler={"max_num_seqs": 4}))[2]
    vl = build_plan(_scenario({"profile": "vllm-v1", "weight_dtype": "fp16"}, kv={"block_size": 64},
                              scheduler={"max_num_seqs": 4}))[2]
    assert lm.kv_free_memory_fraction == 0.8 and vl.kv_free_memory_fraction is None
    assert lm.kv_pool_bytes != vl.kv_pool_bytes

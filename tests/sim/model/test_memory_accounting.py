"""vLLM's two accountings of the memory outside PyTorch (sim/model/memory.py ``memory_accounting``):
``increase`` (0.6.5 and later) and ``total-used`` (0.2.5 to 0.6.4, the CUDA context counted), and the
scenario key that picks one."""

from __future__ import annotations

import pytest

from sim.calib.calibration import load_calibration
from sim.config.scenario import parse_scenario
from sim.engine.parts import build_plan
from sim.errors import ConfigError
from sim.model.hf_config import load_model
from sim.model.memory import (
    DEFAULT_RUNTIME_OVERHEAD_BYTES, LEGACY_RUNTIME_OVERHEAD_BYTES, TOTAL_USED_RUNTIME_OVERHEAD_BYTES,
    TP_RUNTIME_OVERHEAD_BYTES, default_runtime_overhead_bytes, plan_memory)

GIB = 1 << 30


def _rtx3090_29k(accounting: str):
    # vllm-project/vllm #10517, the 29k run: Llama-3.1-8B on an RTX 3090, V0 (0.6.4), 29,000-token profile run
    return plan_memory(load_model("llama-3.1-8b"), load_calibration("rtx-3090").memory_bytes, max_model_len=16384,
                       max_num_batched_tokens=29_000, max_num_seqs=256, engine_profile="vllm-v0",
                       memory_accounting=accounting)


def test_total_used_counts_more_than_the_increase() -> None:
    assert TOTAL_USED_RUNTIME_OVERHEAD_BYTES > DEFAULT_RUNTIME_OVERHEAD_BYTES
    assert default_runtime_overhead_bytes(1, "vllm-v0", "total-used") == TOTAL_USED_RUNTIME_OVERHEAD_BYTES
    assert default_runtime_overhead_bytes(4, "vllm-v0", "total-used") == (
        TOTAL_USED_RUNTIME_OVERHEAD_BYTES + TP_RUNTIME_OVERHEAD_BYTES)
    assert default_runtime_overhead_bytes(1, "vllm-v0") == DEFAULT_RUNTIME_OVERHEAD_BYTES  # the default: increase
    # engines other than vLLM keep their own estimate whatever the accounting
    assert default_runtime_overhead_bytes(1, "sglang", "total-used") == LEGACY_RUNTIME_OVERHEAD_BYTES


def test_total_used_matches_the_logged_non_torch_and_pool() -> None:
    # the log: non_torch_memory=0.35GiB, kv_cache_size=2.89GiB (1478 blocks of 16)
    old, new = _rtx3090_29k("total-used"), _rtx3090_29k("increase")
    assert old.runtime_overhead_bytes / GIB == pytest.approx(0.35, abs=0.005)
    assert new.kv_pool_bytes - old.kv_pool_bytes == pytest.approx(
        TOTAL_USED_RUNTIME_OVERHEAD_BYTES - DEFAULT_RUNTIME_OVERHEAD_BYTES, abs=1)
    assert old.kv_pool_bytes / GIB == pytest.approx(2.89, rel=0.04)
    assert abs(old.pool_tokens / 23_648 - 1) < abs(new.pool_tokens / 23_648 - 1)


def test_an_explicit_overhead_wins_over_the_accounting() -> None:
    plan = plan_memory(load_model("llama-3.1-8b"), load_calibration("rtx-3090").memory_bytes, max_model_len=4096,
                       runtime_overhead_bytes=1 << 20, memory_accounting="total-used")
    assert plan.runtime_overhead_bytes == 1 << 20


def test_an_unknown_accounting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="memory_accounting.*increase, total-used"):
        plan_memory(load_model("llama-3.1-8b"), 24 * GIB, max_model_len=4096, memory_accounting="peak")


def _scenario(**engine):
    return parse_scenario({
        "model": "llama-3.1-8b", "gpu": "rtx-3090",
        "engine": {"profile": "vllm-v0", "max_model_len": 4096, **engine},
        "workload": {"num_requests": 1, "arrival": {"type": "constant", "rate": 1.0},
                     "prompt_tokens": {"type": "fixed", "value": 16}, "output_tokens": {"type": "fixed", "value": 16}}},
        "/tmp/memory-accounting.yaml")


def test_the_scenario_key_reaches_the_plan() -> None:
    _, _, default = build_plan(_scenario())
    _, _, old = build_plan(_scenario(memory_accounting="total-used"))
    assert default.runtime_overhead_bytes == DEFAULT_RUNTIME_OVERHEAD_BYTES
    assert old.runtime_overhead_bytes == TOTAL_USED_RUNTIME_OVERHEAD_BYTES
    assert old.num_gpu_blocks < default.num_gpu_blocks


def test_the_scenario_key_rejects_other_values() -> None:
    with pytest.raises(ConfigError, match="engine.memory_accounting") as err:
        _scenario(memory_accounting="peak")
    assert "total-used" in str(err.value)

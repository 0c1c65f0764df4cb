"""The host-RAM check of kv.offload (sim/engine/host_memory.py, #43): the CPU tier plus the swap
space against engine.host_memory_gb, else 128 GiB per GPU of the engine."""

from __future__ import annotations

import pytest

from sim.config.scenario import parse_scenario
from sim.engine.host_memory import HOST_GIB_PER_GPU, WARN_SHARE, check_host_memory, host_plan
from sim.errors import ConfigError

BLOCK_BYTES, B = 2 << 20, 16  # Llama-3-8B's bf16 block: 2 MiB


def scenario(scenario_dict, offload, **engine):
    data = scenario_dict(kv={"prefix_caching": True, "offload": offload, "swap_space_gb": 4})
    data["engine"] = {**data["engine"], **engine}
    return parse_scenario(data, "/tmp/kvsim-test/host.yaml")


def test_the_plan_counts_the_cpu_tier_and_the_swap_space(scenario_dict) -> None:
    sc = scenario(scenario_dict, [{"tier": "cpu", "capacity_gb": 32}, {"tier": "disk", "capacity_gb": 500}])
    plan = host_plan(sc, BLOCK_BYTES, B)
    assert plan["host_memory_bytes"] == HOST_GIB_PER_GPU * 2**30
    assert plan["kv_offload_host_bytes"] == 32 * 2**30 and plan["swap_space_bytes"] == 4 * 2**30
    assert plan["host_pinned_bytes"] == 36 * 2**30 and plan["kv_offload_disk_bytes"] == 500 * 2**30
    assert check_host_memory(sc, BLOCK_BYTES, B) is None
    assert host_plan(parse_scenario(scenario_dict(), "/tmp/kvsim-test/none.yaml"), BLOCK_BYTES, B) is None


def test_tokens_are_counted_in_whole_blocks(scenario_dict) -> None:
    sc = scenario(scenario_dict, {"tier": "cpu", "capacity_tokens": 1000}, host_memory_gb=64)
    assert host_plan(sc, BLOCK_BYTES, B)["kv_offload_host_bytes"] == 1000 // B * BLOCK_BYTES


def test_past_the_host_memory_is_refused_naming_the_key(scenario_dict) -> None:
    sc = scenario(scenario_dict, {"tier": "cpu", "capacity_gb": 125})  # + 4 GiB of swap > 128 GiB
    with pytest.raises(ConfigError) as exc:
        check_host_memory(sc, BLOCK_BYTES, B)
    line = str(exc.value)
    assert line.startswith("/tmp/kvsim-test/host.yaml: kv.offload.capacity_gb: ") and "\n" not in line
    assert "129.0 GiB" in line and "128.0 GiB" in line and "engine.host_memory_gb" in line
    tokens = scenario(scenario_dict, {"tier": "cpu", "capacity_tokens": 10_000_000})
    with pytest.raises(ConfigError, match="kv.offload.capacity_tokens"):
        check_host_memory(tokens, BLOCK_BYTES, B)


def test_the_machine_key_and_tensor_parallelism_raise_the_ceiling(scenario_dict) -> None:
    big = {"tier": "cpu", "capacity_gb": 200}
    assert check_host_memory(scenario(scenario_dict, big, host_memory_gb=512), BLOCK_BYTES, B) is None
    assert host_plan(scenario(scenario_dict, big, tensor_parallel_size=2), BLOCK_BYTES, B)[
        "host_memory_bytes"] == 2 * HOST_GIB_PER_GPU * 2**30


def test_close_to_the_host_memory_is_a_note(scenario_dict) -> None:
    gib = WARN_SHARE * HOST_GIB_PER_GPU  # the tier alone at the share: with the swap space past it
    note = check_host_memory(scenario(scenario_dict, {"tier": "cpu", "capacity_gb": gib}), BLOCK_BYTES, B)
    assert note.startswith("note: ") and "of the 128.0 GiB of host memory" in note

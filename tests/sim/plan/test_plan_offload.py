"""sim plan over kv.offload's tiers (#43): the space reaches a listed tier by its index, a CPU
tier past the host memory is infeasible without being simulated, and the ones that fit carry
the host's bytes in plan.json's memory."""

from __future__ import annotations

import sim.plan.search as search_mod
from sim.plan.search import evaluate_config
from sim.plan.spec import load_plan

TIERS = [{"tier": "cpu", "capacity_gb": 1}, {"tier": "disk", "capacity_gb": 4}]


def offload_plan(tiny_plan, space: dict) -> dict:
    tiny_plan["base"]["kv"] = {**tiny_plan["base"]["kv"], "prefix_caching": True, "offload": TIERS}
    tiny_plan["base"]["engine"] = {**tiny_plan["base"]["engine"], "host_memory_gb": 16}
    tiny_plan["space"] = space
    return tiny_plan


def test_the_space_sizes_a_listed_tier(tiny_plan, write_plan) -> None:
    spec = load_plan(write_plan(offload_plan(tiny_plan, {"kv.offload.1.capacity_gb": [2, 64]})))
    disks = [c.data["kv"]["offload"][1]["capacity_gb"] for c in spec.configs]
    assert disks == [2, 64]
    assert all(c.data["kv"]["offload"][0]["capacity_gb"] == 1 for c in spec.configs)


def test_a_cpu_tier_past_the_host_memory_is_infeasible_unsimulated(tiny_plan, write_plan, monkeypatch) -> None:
    spec = load_plan(write_plan(offload_plan(tiny_plan, {"kv.offload.0.capacity_gb": [8, 20]})))

    def no_probe(*args, **kwargs):
        raise AssertionError("an infeasible configuration must not be simulated")

    monkeypatch.setattr(search_mod, "probe", no_probe)
    rec = evaluate_config(spec.configs[1], spec.slo, spec.search)
    assert rec["status"] == "infeasible" and rec["probes"] == []
    assert "\n" not in rec["reason"]
    assert "more than the 16.0 GiB of host memory" in rec["reason"]
    memory, _ = search_mod.memory_plan(spec.configs[0].data, spec.configs[0].source)
    assert memory["kv_offload_host_bytes"] == 8 * 2**30 and memory["host_memory_bytes"] == 16 * 2**30
    assert memory["kv_offload_disk_bytes"] == 4 * 2**30

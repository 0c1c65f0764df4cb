"""A disk tier's writes queue on the drive (#43): the CPU tier's demotions hold the disk, so a
read that comes while they are written waits for them (``tiers.disk.read_wait_s``)."""

from __future__ import annotations

from tests.sim.engine.test_disk_tier_runs import tiers
from tests.sim.engine.test_offload_runs import chat


def test_reads_wait_behind_slow_writes(scenario_dict, simulate, assert_drained) -> None:
    slow_on, slow = simulate(chat(scenario_dict, tiers(write_bandwidth_gb_per_s=1e-4, latency_s=1e-4)))
    _, fast = simulate(chat(scenario_dict, tiers(write_bandwidth_gb_per_s=1e3, latency_s=1e-4)))
    assert_drained(slow_on, slow)
    d_slow, d_fast = slow["kv_offload"]["tiers"]["disk"], fast["kv_offload"]["tiers"]["disk"]
    assert d_slow["reads"] > 0 and d_slow["blocks_written"] > 0
    # at 100 KB/s one block's write takes seconds: the reads after it wait for the drive
    assert d_slow["read_wait_s"] > 1.0 > d_fast["read_wait_s"]
    assert slow["ttft_s"]["mean"] > fast["ttft_s"]["mean"]


def test_waiting_is_bounded_by_the_drives_work(scenario_dict, simulate) -> None:
    """A read waits at most for every write and every other read queued before it."""
    _, s = simulate(chat(scenario_dict, tiers(write_bandwidth_gb_per_s=0.01, latency_s=1e-3)))
    d = s["kv_offload"]["tiers"]["disk"]
    assert 0 <= d["read_wait_s"] <= d["reads"] * (d["write_busy_s"] + d["read_busy_s"])

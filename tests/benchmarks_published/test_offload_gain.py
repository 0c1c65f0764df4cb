"""The offload_gain family (benchmarks/published/offload_gain.py): a case states its run with a
``kv.offload`` tier, the runner runs it with and without the tier, and compares the ratio."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SUITE_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "published"
if str(SUITE_DIR) not in sys.path:
    sys.path.insert(0, str(SUITE_DIR))

import offload_gain  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

SCENARIO = {
    "model": "llama-3.1-8b", "gpu": "h100-sxm",
    "engine": {"profile": "vllm-v1", "entrypoint": "offline", "max_model_len": 4096, "host_memory_gb": 500},
    "kv": {"allocator": "paged", "block_size": 16, "prefix_caching": True,
           "offload": {"tier": "cpu", "capacity_gb": 64, "warm": True}},
    "scheduler": {"policy": "chunked-prefill", "max_num_seqs": 1024, "max_num_batched_tokens": 16384},
    "workload": {"num_requests": 200, "arrival": {"type": "offline"},
                 "prompt_tokens": {"type": "fixed", "value": 512}, "output_tokens": {"type": "fixed", "value": 1}},
}


def test_the_baseline_is_the_same_scenario_without_the_tier() -> None:
    off = offload_gain.without_tier(SCENARIO, "c.yaml")
    assert off["kv"]["offload"] is None and SCENARIO["kv"]["offload"] is not None  # the case's mapping untouched
    assert {k: v for k, v in off["kv"].items() if k != "offload"} == \
        {k: v for k, v in SCENARIO["kv"].items() if k != "offload"}
    assert off["workload"] == SCENARIO["workload"]


def test_a_gain_case_without_a_tier_is_refused() -> None:
    bare = {**SCENARIO, "kv": {"allocator": "paged", "prefix_caching": True}}
    with pytest.raises(ConfigError, match="scenario.kv.offload"):
        offload_gain.without_tier(bare, "c.yaml")


def test_the_metrics_are_ratios_of_the_two_summaries() -> None:
    ttft, thr = (offload_gain.GAIN_METRICS[m][1] for m in ("offload_ttft_speedup", "offload_throughput_gain"))
    on = {"ttft_s": {"mean": 0.5}, "throughput": {"total_tokens_per_s": 900.0}}
    off = {"ttft_s": {"mean": 2.0}, "throughput": {"total_tokens_per_s": 100.0}}
    assert (ttft(on, off), thr(on, off)) == (4.0, 9.0)
    assert thr({"throughput": {"total_tokens_per_s": 0.0}}, off) is None  # undefined: the runner says so


def test_a_link_bound_warm_run_gains_what_the_link_allows() -> None:
    """At 100% tier hits on Llama-3.1-8B / H100 each request's 31 blocks (2 MiB each) cross the 50 GB/s
    link, so the run with the tier takes at least that long and gains more than 1x over prefilling."""
    gain = offload_gain.simulate_gain(SCENARIO, "c.yaml", offload_gain.GAIN_METRICS["offload_throughput_gain"][1])
    link_bound = 512 / (31 * 2 * 2**20 / 50e9 + 10e-6)  # tokens/s the link allows
    from sim.config.scenario import parse_scenario
    from sim.engine.logs.metrics import summarize
    from sim.engine.simulation import Simulation
    off = summarize(Simulation(parse_scenario(offload_gain.without_tier(SCENARIO, "c.yaml"), "c.yaml")).run())
    assert 1.0 < gain <= link_bound / off["throughput"]["total_tokens_per_s"] * 1.001

"""The shipped eviction scenarios show what scenarios/README.md says they show
(at reduced sizes, so CI stays fast)."""

from __future__ import annotations

import json

import pytest

from sim.cli.main import main


def run(scenarios_dir, tmp_path, name, *sets):
    out = tmp_path / "_".join([name, *sets]).replace("/", "-")
    args = ["run", str(scenarios_dir / name), "--out", str(out), "--quiet", "--no-report"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    r = summary["requests"]
    assert r["arrived"] == r["completed"] + r["rejected"] and r["in_flight"] == 0
    return summary


def test_streaming_bounds_rag_memory(scenarios_dir, tmp_path) -> None:
    small = "workload.num_requests=120"
    streaming = run(scenarios_dir, tmp_path, "rag-long-context.yaml", small)
    full = run(scenarios_dir, tmp_path, "rag-long-context.yaml", small, "kv.token_eviction.policy=none")
    assert streaming["kv"]["max_kv_tokens_per_request"] == 64 + 4096
    assert streaming["kv"]["tokens_evicted"] > 0 and full["kv"]["tokens_evicted"] == 0
    assert streaming["kv"]["peak_used_fraction"] < 0.6 * full["kv"]["peak_used_fraction"]
    assert streaming["preemptions"]["recompute"] < full["preemptions"]["recompute"]
    assert streaming["notes"]  # says that quality is not simulated


def test_lfu_keeps_popular_prompts_longest(scenarios_dir, tmp_path) -> None:
    rates = {}
    for policy in ("lru", "lfu", "fifo"):
        s = run(scenarios_dir, tmp_path, "shared-prompt-cache.yaml", "workload.num_requests=1500",
                f"kv.prefix_cache_eviction={policy}")
        rates[policy] = s["kv"]["prefix_cache_hit_rate"]
        assert s["kv"]["prefill_tokens_saved"] > 0 and s["kv"]["prefix_cache_evictions"] > 0
    assert rates["lfu"] > rates["lru"] > rates["fifo"]


@pytest.mark.parametrize("victim", ["fewest-blocks", "most-blocks", "longest-remaining"])
def test_victim_policy_changes_who_waits(scenarios_dir, tmp_path, victim) -> None:
    small = "workload.num_requests=800"
    lifo = run(scenarios_dir, tmp_path, "overload-victims.yaml", small)
    other = run(scenarios_dir, tmp_path, "overload-victims.yaml", small,
                f"scheduler.preemption_victim={victim}")
    assert lifo["preemptions"]["recompute"] > 0 and other["preemptions"]["recompute"] > 0
    assert other["policies"]["preemption_victim"] == victim
    assert other["ttft_s"]["p99"] != lifo["ttft_s"]["p99"]
    if victim == "most-blocks":  # throwing away the most work hurts the tail most
        assert other["ttft_s"]["p99"] > lifo["ttft_s"]["p99"]


def test_report_and_table_say_quality_is_not_simulated(scenarios_dir, tmp_path, capsys) -> None:
    out = tmp_path / "rag"
    assert main(["run", str(scenarios_dir / "rag-long-context.yaml"), "--out", str(out),
                 "--set", "workload.num_requests=20"]) == 0
    assert "quality is not simulated" in capsys.readouterr().out
    page = (out / "report.html").read_text()
    assert "class='note'" in page and "quality is not simulated" in page

"""`sim plan`'s table: a short reason for each configuration that is not feasible, and the
configurations costing the same noted with the redundancy each gives (one replica down)."""

from __future__ import annotations

import json

import pytest

from sim.cli.main import main
from sim.plan.results import finish
from sim.plan.spec import SLOTarget
from sim.plan.ties import mark_ties, one_replica_down_rate, short_reason, tie_lines


class _Spec:
    slo = SLOTarget(ttft_s=0.5, tpot_s=0.05, percentile=95, attainment=0.9)
    target_rate = 20.0


def _feasible(rank, replicas, gpus, max_rate, cost, units=None):
    return {"rank": rank, "status": "feasible", "replicas": replicas, "gpus": gpus, "max_rate": max_rate,
            "cost_per_hour": cost, "units": units}


def test_one_replica_down_keeps_the_other_replicas_capacity():
    assert one_replica_down_rate(_feasible(1, 1, 8, 24.0, 98.4)) == 0
    assert one_replica_down_rate(_feasible(1, 2, 8, 12.0, 98.4)) == 12.0
    assert one_replica_down_rate(_feasible(1, 3, 3, 8.0, 1.0)) == 16.0
    # units of 2 replicas each: 2 units x 10 req/s, one of 4 replicas down keeps 3/4
    assert one_replica_down_rate(_feasible(1, 4, 4, 10.0, 1.0, units=2)) == 15.0


def test_two_tp4_replicas_against_one_tp8_at_the_same_cost():
    """The issue's example: the same capacity and cost, redundancy only with two."""
    ranked = [_feasible(1, 1, 8, 24.0, 98.4), _feasible(2, 2, 8, 12.0, 98.4), _feasible(3, 3, 12, 8.0, 147.6)]
    mark_ties(ranked)
    assert [r["tied_with"] for r in ranked] == [[2], [1], []]
    assert [r["one_replica_down_rate"] for r in ranked] == [0.0, 12.0, 16.0]
    assert tie_lines(ranked, 20.0) == [
        "tie: #1, #2 cost the same (98.40 USD/h): #1 1 replica x 8 GPU: no redundancy, one down serves nothing; "
        "#2 2 replicas x 4 GPU: one down serves 12.00 req/s (60% of the target)"]


def test_no_tie_no_line_and_enough_replicas_still_serve_the_target():
    ranked = [_feasible(1, 3, 3, 10.0, 5.0), _feasible(2, 4, 4, 7.0, 6.0)]
    mark_ties(ranked)
    assert tie_lines(ranked, 20.0) == []
    ranked = [_feasible(1, 3, 3, 10.0, 5.0), _feasible(2, 3, 3, 9.0, 5.0)]
    mark_ties(ranked)
    assert tie_lines(ranked, 20.0) == [
        "tie: #1, #2 cost the same (5.00 USD/h): #1 3 replicas x 1 GPU: one down still serves the target "
        "(20.00 req/s); #2 3 replicas x 1 GPU: one down serves 18.00 req/s (90% of the target)"]


def test_short_reasons():
    spec = _Spec()
    infeasible = {"status": "infeasible", "reason": (
        "one sequence of 4096 tokens needs 256 KV blocks (4.00 MiB) but the pool has 64 (1.00 MiB); "
        "set max_model_len <= 1024 or free memory (gpu_memory_utilization, a smaller model or KV dtype)")}
    assert short_reason(infeasible, spec) == "one sequence of 4096 tokens needs 256 KV blocks but the pool has 64"
    no_memory = {"status": "infeasible", "reason": (
        "no memory left for the KV cache: 0.9 x 24.00 GiB = 21.60 GiB, minus weights 131.40 GiB (llama-3-70b), "
        "activations 1.00 GiB, runtime overhead 2.00 GiB leaves -112.80 GiB; use a bigger GPU")}
    assert short_reason(no_memory, spec) == "no memory left for the KV cache"
    unreachable = {"status": "slo-unreachable", "reason": "fails the SLO at search.min_rate 0.5 req/s (...)",
                   "probes": [{"rate": 1.0, "ttft_s": 0.1}, {"rate": 0.5, "ttft_s": 0.9, "tpot_s": 0.01,
                                                            "attainment": 0.4, "rejected": 0, "in_flight": 0}]}
    assert short_reason(unreachable, spec) == "at 0.5 req/s: p95 TTFT 900 > 500 ms, attainment 40% < 90%"
    undrained = {"status": "slo-unreachable", "reason": "x", "probes": [
        {"rate": 0.5, "ttft_s": 0.1, "tpot_s": 0.01, "attainment": 0.95, "rejected": 3, "in_flight": 1}]}
    assert short_reason(undrained, spec) == "at 0.5 req/s: did not drain (3 rejected, 1 in flight)"
    error = {"status": "error", "reason": "RuntimeError: " + "x" * 200 + "\nmore"}
    got = short_reason(error, spec)
    assert got.startswith("RuntimeError: xxx") and got.endswith("…") and len(got) == 72
    assert short_reason({"status": "feasible"}, spec) == ""


def test_the_cli_table_shows_the_reason_and_the_tie(tiny_plan, write_plan, tmp_path, capsys):
    # 64 blocks of 16: max_model_len 4096 cannot hold one sequence; max_num_seqs 16 and 32 both
    # above what the pool runs at once, so the two run alike and cost the same
    tiny_plan["space"] = {"engine.max_model_len": [512, 4096], "scheduler.max_num_seqs": [16, 32]}
    out = tmp_path / "out"
    assert main(["plan", write_plan(tiny_plan), "--out", str(out), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "plan.json").read_text())["configurations"]
    ok = [c for c in doc if c["status"] == "feasible"]
    assert [c["tied_with"] for c in ok] == [[2], [1]] and ok[0]["cost_per_hour"] == ok[1]["cost_per_hour"]
    assert all(c["one_replica_down_rate"] == pytest.approx((c["replicas"] - 1) * c["max_rate"]) for c in ok)
    header = next(line for line in printed.splitlines() if "status" in line)
    assert header.rstrip("┃ ").endswith("reason")
    flat = " ".join(line.strip("│ ") for line in printed.splitlines())
    assert "one sequence of 4096" in flat and "tokens needs 256 KV blocks" in flat
    tie = next(line for line in printed.splitlines() if line.startswith("tie: "))
    assert tie.startswith("tie: #1, #2 cost the same (") and "with the same redundancy" in tie


def test_an_all_feasible_plan_has_no_reason_column(tiny_plan, write_plan, tmp_path, capsys):
    assert main(["plan", write_plan(tiny_plan), "--out", str(tmp_path / "out"), "--workers", "1"]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "status" in line)
    assert "reason" not in header


def test_finish_marks_ties_on_the_ranked_records(tiny_plan, write_plan):
    from sim.plan.spec import load_plan

    spec = load_plan(write_plan(tiny_plan))
    base = {"values": {}, "gpu": "a100-80gb", "tensor_parallel_size": 1, "gpus_per_replica": 1, "seed": 3,
            "reason": None, "memory": {"max_full_length_requests": 2, "kv_pool_tokens": 1024}, "capped": False,
            "probes": []}
    at = {"ttft_s": 0.01, "tpot_s": 0.001, "attainment": 1.0, "mean_output_tokens": 50}
    records = [{**base, "index": i, "status": "feasible", "max_rate": rate, "at_max_rate": at}
               for i, rate in enumerate((50.0, 50.0, 34.0))]
    ranked = finish(spec, records)
    assert [r["tied_with"] for r in ranked] == [[2], [1], []]

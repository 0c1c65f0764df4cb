"""`sim run` on the shipped scenarios, through sim.cli.main (as a user would run them)."""

from __future__ import annotations

import csv
import json

import pytest

from sim.cli.main import main


def run(scenarios_dir, tmp_path, name, *overrides, report=False):
    out = tmp_path / "out"
    argv = ["run", str(scenarios_dir / name), "--out", str(out), "--quiet"]
    if not report:
        argv.append("--no-report")
    for o in overrides:
        argv += ["--set", o]
    assert main(argv) == 0
    return out, json.loads((out / "summary.json").read_text())


def test_8gb_card_rejects_at_32k(scenarios_dir, tmp_path) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-8gb-card.yaml")
    kv, reqs = s["kv"], s["requests"]
    # The pool holds one 32768-token reservation and not two.
    assert kv["max_full_length_seqs"] == 1 and kv["pool_tokens"] < 2 * 32768
    # 8 conversations arrive within 70 ms: the first is admitted, the 7 others find the
    # pool reserved and are turned away; the admitted one runs its 3 turns.
    assert reqs["rejected_by_reason"] == {"kv_cache_full": 7}
    assert reqs["completed"] == 3 and reqs["arrived"] == 10 and reqs["in_flight"] == 0


def test_8gb_card_lower_max_tokens_does_not_help(scenarios_dir, tmp_path) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-8gb-card.yaml", "workload.max_tokens=512")
    assert s["requests"]["rejected"] == 7
    assert s["requests"]["rejected_by_reason"] == {"kv_cache_full": 7}


def test_8gb_card_max_model_len_4096_serves_everyone(scenarios_dir, tmp_path) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-8gb-card.yaml", "engine.max_model_len=4096")
    assert s["kv"]["pool_tokens"] >= 8 * 4096  # 8 static reservations fit at once
    assert s["requests"]["rejected"] == 0
    assert s["requests"]["completed"] == s["requests"]["arrived"] == 24


def test_8gb_card_one_conversation_is_fine(scenarios_dir, tmp_path) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-8gb-card.yaml", "workload.num_requests=1")
    assert s["requests"]["rejected"] == 0 and s["requests"]["completed"] == 3


def test_8gb_card_paged_also_fixes_it(scenarios_dir, tmp_path) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-8gb-card.yaml", "kv.allocator=paged")
    assert s["requests"]["rejected"] == 0 and s["requests"]["completed"] == 24


def test_prealloc_contiguous_static_wastes_most_of_its_reservation(scenarios_dir, tmp_path) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-prealloc.yaml")
    # ~900 prompt + ~130 output tokens in an 8192-token reservation: about 1 - 1030/8192 unused
    assert 0.80 < s["kv"]["mean_allocated_unused_fraction"] < 0.95
    assert s["requests"]["completed"] == 16


def test_prealloc_paged_wastes_under_4_percent(scenarios_dir, tmp_path) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-prealloc.yaml", "kv.allocator=paged")
    assert s["kv"]["mean_allocated_unused_fraction"] < 0.04
    assert s["requests"]["completed"] == 16


def test_chatbot_writes_consistent_files(scenarios_dir, tmp_path) -> None:
    out, s = run(scenarios_dir, tmp_path, "chatbot.yaml", report=True)
    for name in ("summary.json", "requests.csv", "steps.csv", "report.html"):
        assert (out / name).stat().st_size > 0
    with open(out / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(out / "steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    reqs = s["requests"]
    assert len(rows) == reqs["arrived"] == 3000
    assert sum(r["status"] == "finished" for r in rows) == reqs["completed"]
    assert sum(r["status"] == "rejected" for r in rows) == reqs["rejected"]
    assert reqs["in_flight"] == 0
    assert len(steps) == s["engine"]["num_steps"] > 0
    assert [int(r["request_id"]) for r in rows] == list(range(3000))
    assert "<html" in (out / "report.html").read_text()[:2000].lower()


def test_json_flag_prints_the_summary(scenarios_dir, tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert main(["run", str(scenarios_dir / "seed-prealloc.yaml"), "--out", str(out),
                 "--no-report", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "summary.json").read_text())
    assert printed == saved


@pytest.mark.parametrize("override", ["kv.block_size=32", "scheduler.policy=chunked-prefill",
                                      "scheduler.policy=static", "kv.allocator=contiguous-exact"])
def test_prealloc_overrides_all_drain(scenarios_dir, tmp_path, override) -> None:
    _, s = run(scenarios_dir, tmp_path, "seed-prealloc.yaml", override)
    assert s["requests"]["completed"] == 16 and s["requests"]["in_flight"] == 0


def test_deepseek_attention_data_parallel_holds_every_latent_once(scenarios_dir, tmp_path) -> None:
    out, dp = run(scenarios_dir, tmp_path / "dp", "deepseek-r1-dp-attention.yaml", report=True)
    assert (out / "report.html").stat().st_size > 0
    _, tp = run(scenarios_dir, tmp_path / "tp", "deepseek-r1-dp-attention.yaml", "engine.attention_data_parallel=false")
    assert dp["memory"]["attention_ranks"] == 8 and tp["memory"]["attention_ranks"] == 1
    assert dp["kv"]["pool_tokens"] > 5 * tp["kv"]["pool_tokens"]  # no latent on every GPU
    assert dp["memory"]["weight_bytes"] > tp["memory"]["weight_bytes"]  # every GPU holds all the attention
    for s in (dp, tp):
        assert s["requests"]["completed"] == s["requests"]["arrived"] == 600
    assert dp["preemptions"]["recompute"] == 0 < tp["preemptions"]["recompute"]  # the plain pool runs out
    assert dp["ttft_s"]["p90"] < tp["ttft_s"]["p90"] / 10 and dp["goodput_requests_per_s"] > tp["goodput_requests_per_s"]

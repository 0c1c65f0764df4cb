"""Sweep points with identical results are grouped, in results.csv (``identical_to``,
``identical_note``) and the terminal, with the reason where the summaries show it; the best-points
table ranks a group once."""

from __future__ import annotations

import csv
import io

import pytest
import yaml

from sim.cli.main import main
from sim.sweep.grid import plan_sweep
from sim.sweep.identical import identical_groups, outcome
from sim.sweep.runner import results_csv


@pytest.fixture(scope="module")
def scenario(tmp_path_factory, tiny_sweep_scenario):
    path = tmp_path_factory.mktemp("ident") / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep_scenario))
    return str(path)


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _summary(**over) -> dict:
    s = {"policies": {"prefix_caching": False, "preemption": "recompute"}, "profile": {"profile": "eager"},
         "ttft_s": {"p50": 0.1}, "requests": {"completed": 10}, "kv": {"prefix_cache_evictions": 0},
         "preemptions": {"recompute": 0, "swap": 0}, "slo": {"ttft_s": 2.0, "attained_fraction": 1.0},
         "sim_wall_s": 0.5}
    for path, value in over.items():
        section, _, key = path.partition("__")
        if key:
            s[section] = {**s[section], key: value}
        else:
            s[section] = value
    return s


def _records(plan, summaries) -> dict:
    return {p.point_id: {"point_id": p.point_id, "values": p.values, "status": "ok", "error": None, "summary": s}
            for p, s in zip(plan.points, summaries)}


def test_the_outcome_leaves_out_the_settings_echo_and_wall_time_but_not_results():
    base = outcome(_summary())
    assert outcome(_summary(policies__preemption="swap", profile={"profile": "vllm-v1"}, sim_wall_s=9.0,
                            slo__ttft_s=1.0)) == base
    assert outcome(_summary(ttft_s__p50=0.10000001)) != base
    assert outcome(_summary(slo__attained_fraction=0.9)) != base
    assert outcome(_summary(preemptions__swap=1)) != base


def test_a_real_sweep_groups_the_points_no_preemption_told_apart(scenario, tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", scenario, "--grid", "kv.block_size=8,16,32", "--grid", "scheduler.preemption=recompute,swap",
            "--out", str(out), "--workers", "1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = _rows((out / "results.csv").read_text())
    grouped = [i + 1 for i, r in enumerate(rows) if r["identical_to"]]
    assert grouped == [5, 6]  # block 32: nothing is preempted, recompute and swap run alike
    assert rows[4]["preemptions.recompute"] == rows[5]["preemptions.swap"] == "0"
    assert rows[4]["identical_to"] == rows[5]["identical_to"] == rows[4]["point_id"]
    note = "no preemption happened, so scheduler.preemption had no effect"
    assert rows[4]["identical_note"] == rows[5]["identical_note"] == note
    assert all(r["identical_note"] == "" for r in rows[:4])
    assert f"identical    points 5, 6: {note}" in printed
    assert "(identical points once)" in printed
    table = [[c.strip() for c in line.strip("│ ").split("│")] for line in printed.splitlines() if line.startswith("│")]
    assert [r[0] for r in table].count("6") == 0 and ["5", "32", "recompute"] == table[0][:3]  # block 32 ranks first
    assert table[0][-1] == "6"  # its identical point


def test_prefix_eviction_swept_with_prefix_caching_off_says_so(scenario, tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", scenario, "--grid", "kv.prefix_cache_eviction=lru,lfu,fifo", "--set",
                 "kv.prefix_caching=false", "--out", str(out), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    rows = _rows((out / "results.csv").read_text())
    assert {r["identical_to"] for r in rows} == {rows[0]["point_id"]}
    assert "identical    points 1, 2, 3: prefix caching is off, so kv.prefix_cache_eviction had no effect" in printed


def test_reasons_from_the_summaries(scenario):
    plan = plan_sweep(scenario, ["kv.swap_space_gb=1,2", "kv.block_size=8,16"])
    same = _summary(preemptions={"recompute": 3, "swap": 0})
    groups = identical_groups(plan, _records(plan, [same] * 4))
    assert len(groups) == 1 and groups[0].points == (0, 1, 2, 3)
    assert groups[0].reason == ("no request was swapped, so kv.swap_space_gb had no effect; "
                                "kv.block_size had no effect on these runs")
    # pairs: block 8's two points alike, block 16's two alike, the pairs different
    other = _summary(preemptions={"recompute": 3, "swap": 0}, ttft_s={"p50": 0.2})
    groups = identical_groups(plan, _records(plan, [same, other, same, other]))
    assert [(g.points, g.keys) for g in groups] == [((0, 2), ("kv.swap_space_gb",)), ((1, 3), ("kv.swap_space_gb",))]
    assert groups[0].numbers() == "1, 3"


def test_prefix_eviction_with_caching_on_but_nothing_evicted(scenario):
    plan = plan_sweep(scenario, ["kv.prefix_cache_eviction=lru,lfu"])
    s = _summary(policies={"prefix_caching": True})
    [g] = identical_groups(plan, _records(plan, [s, s]))
    assert g.reason == "no cached prefix block was evicted, so kv.prefix_cache_eviction had no effect"
    evicted = _summary(policies={"prefix_caching": True}, kv={"prefix_cache_evictions": 5})
    [g] = identical_groups(plan, _records(plan, [evicted, evicted]))
    assert g.reason == "kv.prefix_cache_eviction had no effect on these runs"


def test_points_that_differ_or_did_not_finish_are_not_grouped(scenario):
    plan = plan_sweep(scenario, ["kv.block_size=8,16,32"])
    records = _records(plan, [_summary(), _summary(ttft_s={"p50": 0.3}), _summary()])
    records[plan.points[2].point_id].update(status="error", summary=None, error="boom")
    assert identical_groups(plan, records) == []
    rows = _rows(results_csv(plan, records))
    assert [r["identical_to"] for r in rows] == ["", "", ""]

"""``kv.offload`` on the command line (#43): bad values exit 2 with one line naming the key and
what is allowed; the shipped scenario runs end to end with its HTML report; ``sim sweep``
varies the tier's size."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from sim.cli.main import main

GOOD = {
    "name": "offload-input",
    "model": "tiny-llama",
    "gpu": "a100-80gb",
    "engine": {"profile": "eager", "max_model_len": 256, "num_gpu_blocks_override": 64},
    "kv": {"allocator": "paged", "block_size": 16, "prefix_caching": True,
           "offload": {"tier": "cpu", "capacity_gb": 1}},
    "workload": {"num_requests": 2, "arrival": {"type": "constant", "rate": 10.0},
                 "prompt_tokens": {"type": "fixed", "value": 20},
                 "output_tokens": {"type": "fixed", "value": 5}},
}


def run_with(tmp_path, capsys, kv: dict | None = None, offload: dict | None = None, **top):
    data = json.loads(json.dumps(GOOD))
    data["kv"].update(kv or {})
    if offload is not None:
        data["kv"]["offload"] = offload
    data.update(top)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    rc = main(["run", str(path), "--no-report", "--quiet", "--out", str(tmp_path / "out")])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(("offload", "key", "says"), [
    ({"tier": "disk", "capacity_gb": 1}, "kv.offload", "give the list [cpu, disk]"),
    ([{"tier": "disk", "capacity_gb": 1}], "kv.offload", "[cpu] or [cpu, disk]"),
    ([{"tier": "cpu", "capacity_gb": 1}, {"tier": "disk", "capacity_gb": 1e9}], "kv.offload.1.capacity_gb", "ceiling"),
    ([{"tier": "cpu", "capacity_gb": 1}, {"tier": "tape", "capacity_gb": 1}], "kv.offload.1.tier", "'disk'"),
    ([{"tier": "cpu", "capacity_gb": 1}, {"tier": "disk", "capacity_gb": 1, "store": "reused"}], "kv.offload.1", "for tier cpu"),
    ({"tier": "cpu", "capacity_gb": 1, "write_bandwidth_gb_per_s": 3}, "kv.offload", "disk tier's"),
    ({"tier": "cpu"}, "kv.offload", "exactly one of capacity_gb"),
    ({"tier": "cpu", "capacity_gb": 1, "capacity_tokens": 100}, "kv.offload", "exactly one of capacity_gb"),
    ({"tier": "cpu", "capacity_gb": 0}, "kv.offload.capacity_gb", "greater than 0"),
    ({"tier": "cpu", "capacity_gb": "lots"}, "kv.offload.capacity_gb", ""),
    ({"tier": "cpu", "capacity_tokens": 2.5}, "kv.offload.capacity_tokens", ""),
    ({"tier": "cpu", "capacity_gb": 1, "store": "always"}, "kv.offload.store", "'evicted' or 'reused'"),
    ({"tier": "cpu", "capacity_gb": 1, "eviction": "lfu"}, "kv.offload.eviction", "'lru'"),
    ({"tier": "cpu", "capacity_gb": 1, "bandwidth_gb_per_s": -3}, "kv.offload.bandwidth_gb_per_s", "greater than 0"),
    ({"tier": "cpu", "capacity_gb": 1, "latency_s": 5}, "kv.offload.latency_s", ""),
    ({"tier": "cpu", "capacity_gb": 1, "size": 3}, "kv.offload.size", "allowed keys"),
    ({"tier": "cpu", "capacity_gb": 1e9}, "kv.offload.capacity_gb", ""),
    ("big", "kv.offload", ""),
])
def test_bad_offload_values_exit_2_with_one_line(tmp_path, capsys, offload, key, says) -> None:
    rc, err = run_with(tmp_path, capsys, offload=offload)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith(f"error: {tmp_path / 's.yaml'}: {key}: ")
    assert says in lines[0]


@pytest.mark.parametrize(("change", "says"), [
    ({"kv": {"prefix_caching": False}}, "needs kv.prefix_caching: true"),
    ({"scheduler": {"policy": "static"}}, "not 'static'"),
    ({"engine": {"pipeline_parallel_size": 2}}, "single-stage engines only"),
    ({"cluster": {"disaggregation": {"prefill_replicas": 1, "decode_replicas": 1, "kv_transfer": {
        "bandwidth_gbps": 100, "latency_s": 1e-4, "granularity": "block"}}}}, "not disaggregated pools"),
])
def test_offload_needs_prefix_caching_and_one_engine(tmp_path, capsys, change, says) -> None:
    rc, err = run_with(tmp_path, capsys, kv=change.pop("kv", None), **change)
    assert rc == 2
    assert err.strip().splitlines() == [err.strip()] and ": kv.offload: " in err and says in err


def test_shipped_scenario_runs_with_its_report(scenarios_dir, tmp_path) -> None:
    out = tmp_path / "run"
    assert main(["run", str(scenarios_dir / "multiturn-offload.yaml"), "--quiet", "--out", str(out)]) == 0
    assert "kv_offload.hit_tokens" in (out / "report.html").read_text()
    summary = json.loads((out / "summary.json").read_text())
    tier = summary["kv_offload"]
    assert tier["hit_tokens"] > 0 and tier["bytes_loaded"] > 0 and tier["hit_rate"] > 0.5
    assert summary["requests"]["completed"] == summary["requests"]["arrived"]


def test_sweep_varies_the_tier_size(scenarios_dir, tmp_path) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenarios_dir / "multiturn-offload.yaml"), "--grid", "kv.offload.capacity_gb=1,32",
                 "--workers", "1", "--quiet", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    by_size = {r["kv.offload.capacity_gb"]: r for r in rows}
    assert int(by_size["1"]["kv_offload.capacity_blocks"]) < int(by_size["32"]["kv_offload.capacity_blocks"])
    assert float(by_size["1"]["kv_offload.hit_tokens"]) < float(by_size["32"]["kv_offload.hit_tokens"])


def test_a_tier_past_the_host_memory_exits_2_with_one_line(tmp_path, capsys) -> None:
    rc, err = run_with(tmp_path, capsys, offload={"tier": "cpu", "capacity_gb": 20}, engine={
        **GOOD["engine"], "host_memory_gb": 16})
    assert rc == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / 's.yaml'}: kv.offload.capacity_gb: ")
    assert "24.0 GiB of pinned host memory, more than the 16.0 GiB" in lines[0]
    assert not (tmp_path / "out" / "summary.json").exists()


def test_the_memory_section_reports_the_host_bytes(tmp_path, capsys) -> None:
    rc, err = run_with(tmp_path, capsys, offload={"tier": "cpu", "capacity_gb": 10}, engine={
        **GOOD["engine"], "host_memory_gb": 16})
    assert rc == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["memory"]["host_pinned_bytes"] == 14 * 2**30 and summary["memory"]["host_memory_bytes"] == 16 * 2**30


def test_a_disk_tier_runs_end_to_end_with_its_report(scenarios_dir, tmp_path, capsys) -> None:
    """The shipped chat with a 2 GiB CPU tier over a 64 GiB disk: the terminal, summary.json and
    report.html carry each tier's figures."""
    out = tmp_path / "run"
    tiers = "[{tier: cpu, capacity_gb: 2}, {tier: disk, capacity_gb: 64}]"
    assert main(["run", str(scenarios_dir / "multiturn-offload.yaml"), "--set", f"kv.offload={tiers}",
                 "--out", str(out)]) == 0
    captured = capsys.readouterr()
    shown = captured.out
    assert "warning" not in captured.err  # every report section was drawn
    assert "kv offload   cpu+disk:" in shown and "  disk tier  64.0 GiB:" in shown
    summary = json.loads((out / "summary.json").read_text())
    tier = summary["kv_offload"]
    disk = tier["tiers"]["disk"]
    assert disk["hit_tokens"] > 0 and disk["bytes_written"] > 0 and disk["read_busy_s"] > 0
    assert summary["memory"]["kv_offload_disk_bytes"] == 64 * 2**30
    assert summary["requests"]["completed"] == summary["requests"]["arrived"]
    html = (out / "report.html").read_text()
    assert f"kv_offload.tiers.disk.hit_tokens</td><td>{disk['hit_tokens']}<" in html


def test_sweep_varies_a_listed_tier(scenarios_dir, tmp_path) -> None:
    out = tmp_path / "sweep"
    tiers = "[{tier: cpu, capacity_gb: 2}, {tier: disk, capacity_gb: 64}]"
    assert main(["sweep", str(scenarios_dir / "multiturn-offload.yaml"), "--set", f"kv.offload={tiers}",
                 "--grid", "kv.offload.1.capacity_gb=1,16", "--workers", "1", "--quiet", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    by_size = {r["kv.offload.1.capacity_gb"]: r for r in rows}
    assert (int(by_size["1"]["kv_offload.tiers.disk.capacity_blocks"])
            < int(by_size["16"]["kv_offload.tiers.disk.capacity_blocks"]))
    assert float(by_size["1"]["kv_offload.tiers.disk.hit_tokens"]) < float(by_size["16"]["kv_offload.tiers.disk.hit_tokens"])


def test_set_names_a_missing_list_item(tmp_path, capsys) -> None:
    data = json.loads(json.dumps(GOOD))
    data["kv"]["offload"] = [{"tier": "cpu", "capacity_gb": 1}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--no-report", "--quiet", "--set", "kv.offload.3.capacity_gb=2",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "kv.offload.3.capacity_gb" in err and "allowed 0 to 0" in err


def test_sim_kv_sizes_a_cpu_tier(capsys) -> None:
    assert main(["kv", "--model", "llama-3.1-8b", "--offload-gb", "32", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["kv_offload_blocks"] == 32 * 2**30 // r["bytes_per_block"]
    assert r["kv_offload_tokens"] == r["kv_offload_blocks"] * r["block_size"]
    assert r["kv_offload_host_bytes"] == r["kv_offload_blocks"] * r["bytes_per_block"]
    assert r["host_memory_bytes"] == 128 * 2**30 and r["kv_offload_host_share"] == pytest.approx(0.25)
    assert main(["kv", "--model", "llama-3.1-8b", "--offload-gb", "200", "--tp", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_memory_bytes"] == 256 * 2**30
    assert main(["kv", "--model", "llama-3.1-8b", "--offload-gb", "32"]) == 0
    assert "CPU tier (kv.offload)" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "flag", "says"), [
    (["--offload-gb", "200"], "--offload-gb", "more than the 128.0 GiB of host memory"),
    (["--offload-gb", "64", "--host-memory-gb", "32"], "--offload-gb", "more than the 32.0 GiB"),
    (["--host-memory-gb", "32"], "--host-memory-gb", "with --offload-gb only"),
    (["--offload-gb", "-1"], "--offload-gb", "must be in"),
    (["--offload-gb", "lots"], "--offload-gb", "expected a number"),
])
def test_sim_kv_refuses_a_tier_past_the_host_memory(capsys, argv, flag, says) -> None:
    assert main(["kv", "--model", "llama-3.1-8b", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith(f"error: <cli>: {flag}: ") and says in err

"""`sim sweep`: grid parsing and validation, per-point errors, results.csv, resume."""

from __future__ import annotations

import csv
import io

import pytest
import yaml

from sim.cli.main import main
from sim.errors import ConfigError
from sim.sweep.executors import run_local
from sim.sweep.grid import plan_sweep, split_values
from sim.outputs.files import flatten
from sim.sweep.runner import load_records, points_dir, results_csv, run_sweep

GRID = ["kv.block_size=8,16,32", "scheduler.preemption=recompute,swap"]


@pytest.fixture
def scenario(tmp_path, tiny_sweep_scenario):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep_scenario))
    return str(path)


def in_process(tasks, on_result):
    run_local(tasks, on_result, 1)


def rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_split_values_keeps_commas_inside_brackets_and_quotes():
    assert split_values("1, 2,3") == ["1", "2", "3"]
    assert split_values("{type: poisson, rate: 2},[1, 2],'a,b'") == [
        "{type: poisson, rate: 2}", "[1, 2]", "'a,b'"]


def test_plan_is_the_cartesian_product_in_option_order(scenario):
    plan = plan_sweep(scenario, GRID, ["workload.num_requests=10"])
    assert [tuple(p.values.values()) for p in plan.points] == [
        (8, "recompute"), (8, "swap"), (16, "recompute"), (16, "swap"), (32, "recompute"), (32, "swap")]
    assert all(p.data["workload"]["num_requests"] == 10 for p in plan.points)
    assert len({p.point_id for p in plan.points}) == 6 and all(p.error is None for p in plan.points)


@pytest.mark.parametrize("grid, key, words", [
    (["kv.block_siz=8,16"], "kv.block_siz", "unknown key"),
    (["kv.block_size=0,16"], "kv.block_size", "grid value '0' fails in every point"),
    (["engine.kv_dtype=fp16,fp9"], "engine.kv_dtype", "grid value 'fp9'"),
    (["kv.block_size"], "kv.block_size", "expected key.path=v1,v2"),
    (["kv.block_size=8,,16"], "kv.block_size", "empty value"),
    (["kv.block_size=8", "kv.block_size=16"], "kv.block_size", "given twice"),
    (["kv.block_size=8,8"], "kv.block_size", "repeated"),
])
def test_bad_grid_exits_2_with_one_line_before_running(scenario, tmp_path, capsys, grid, key, words):
    argv = ["sweep", scenario, "--out", str(tmp_path / "out"), "--quiet"]
    for g in grid:
        argv += ["--grid", g]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and key in err and words in err, err
    assert not (tmp_path / "out").exists()  # nothing ran


def test_invalid_combination_is_recorded_and_the_sweep_goes_on(scenario, tmp_path):
    plan = plan_sweep(scenario, ["kv.allocator=contiguous-exact,paged", "kv.prefix_caching=false,true"])
    assert [p.error is not None for p in plan.points] == [False, True, False, False]
    stats = run_sweep(plan, tmp_path, in_process)
    assert (stats.num_computed, stats.num_invalid, stats.num_errors) == (3, 1, 0)
    got = rows((tmp_path / "results.csv").read_text())
    assert [r["status"] for r in got] == ["ok", "invalid", "ok", "ok"]
    assert "prefix_caching needs allocator 'paged'" in got[1]["error"] and got[1]["ttft_s.p50"] == ""
    assert got[0]["kv.allocator"] == "contiguous-exact" and got[0]["kv.prefix_caching"] == "false"
    assert int(got[3]["requests.completed"]) == 50


def test_a_crashing_point_is_recorded_with_its_error(scenario, tmp_path, monkeypatch):
    from sim.engine.simulation import Simulation

    real_run = Simulation.run

    def crash_on_block_8(self):
        if self.sc.kv.block_size == 8:
            raise RuntimeError("boom at block 8")
        return real_run(self)

    monkeypatch.setattr(Simulation, "run", crash_on_block_8)
    stats = run_sweep(plan_sweep(scenario, ["kv.block_size=8,16"]), tmp_path, in_process)
    assert (stats.num_computed, stats.num_errors) == (2, 1)
    got = rows((tmp_path / "results.csv").read_text())
    assert got[0]["status"] == "error" and got[0]["error"] == "RuntimeError: boom at block 8"
    assert got[1]["status"] == "ok"


def test_interrupted_sweep_resumes_without_recomputing_finished_points(scenario, tmp_path):
    plan = plan_sweep(scenario, GRID)
    full = tmp_path / "full"
    run_sweep(plan, full, in_process)

    out = tmp_path / "interrupted"
    seen = []

    def interrupt_after_two(record):
        seen.append(record["point_id"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan, out, in_process, on_done=interrupt_after_two)
    kept = {p.name: p.stat() for p in points_dir(out).glob("*.json")}
    assert sorted(kept) == sorted(f"{i}.json" for i in seen)
    assert not (out / "results.csv").exists()

    stats = run_sweep(plan, out, in_process, resume=True)
    assert (stats.num_reused, stats.num_computed) == (2, 4)
    for name, before in kept.items():  # the finished points' files were not rewritten
        after = (points_dir(out) / name).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (out / "results.csv").read_text() == (full / "results.csv").read_text()
    again = run_sweep(plan, out, in_process, resume=True)
    assert (again.num_reused, again.num_computed) == (6, 0)


def test_cli_sweep_writes_files_and_refuses_to_overwrite_without_resume(scenario, tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", scenario, "--grid", "kv.block_size=16,32", "--out", str(out), "--workers", "2"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "points       2: ok 2, invalid 0, error 0 (computed now 2, reused 0)" in printed
    assert "the best 2 of 2 points by goodput" in printed and f"{out}/ (results.csv" in printed
    assert len(rows((out / "results.csv").read_text())) == 2 and (out / "whatif.html").is_file()
    assert main(argv) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main(argv + ["--resume"]) == 0
    assert "computed now 0, reused 2" in capsys.readouterr().out


def test_results_csv_columns_follow_the_summary_generically(scenario):
    plan = plan_sweep(scenario, ["kv.block_size=8,16"])
    records = {p.point_id: {"status": "ok", "error": None, "summary": {
        "kv": {"new_counter": i, "nested": {"deep": 0.5}}, "sim_wall_s": 1.23, "notes": ["a"]}}
        for i, p in enumerate(plan.points)}
    got = rows(results_csv(plan, records))
    assert list(got[0]) == ["point_id", "kv.block_size", "status", "error", "kv.new_counter",
                            "kv.nested.deep", "notes", "identical_to", "identical_note"]  # no wall-clock column
    assert [r["kv.new_counter"] for r in got] == ["0", "1"] and got[0]["notes"] == '["a"]'
    assert flatten({"a": {"b": {"c": 1}}}) == {"a.b.c": 1}


def test_malformed_point_files_are_config_errors_naming_the_file(tmp_path):
    points_dir(tmp_path).mkdir(parents=True)
    bad = points_dir(tmp_path) / "abc.json"
    bad.write_text("{half")
    with pytest.raises(ConfigError, match="abc.json: <json>: not valid JSON"):
        load_records(tmp_path)
    bad.write_text('{"point_id": "other"}')
    with pytest.raises(ConfigError, match="abc.json: values: required key is missing"):
        load_records(tmp_path)


def test_ray_address_needs_the_ray_executor(scenario, tmp_path, capsys):
    assert main(["sweep", scenario, "--grid", "kv.block_size=16", "--out", str(tmp_path),
                 "--ray-address", "auto"]) == 2
    assert "only with --executor ray" in capsys.readouterr().err


def test_plan_errors_are_config_errors(scenario):
    with pytest.raises(ConfigError):
        plan_sweep(scenario, [])


def test_whatif_views_follow_the_varied_keys(scenario):
    from sim.sweep.whatif import page_data

    plan = plan_sweep(scenario, GRID)
    views = {v["name"]: v for v in page_data(plan, {})["presets"]}
    swap = views["Swap vs recompute"]
    assert (swap["x"], swap["color"]) == ("kv.block_size", "scheduler.preemption")
    assert (views["Block size"]["x"], views["Block size"]["color"]) == ("kv.block_size", "scheduler.preemption")
    knee = views["Throughput-latency: where is the knee?"]
    assert knee["x"] is None and "vary workload.arrival.rate" in knee["why"]

"""``sim sweep``: run every point of a grid, keep each result, write results.csv.

Layout of a sweep folder::

    DIR/points/<point_id>.json   one record per finished point, written atomically the
                                 moment it finishes (``--resume`` reuses them)
    DIR/results.csv              one row per point, in grid order
    DIR/whatif.html              the interactive what-if page (whatif.py)

A record is ``{"point_id", "values", "status": "ok" | "invalid" | "error", "error",
"summary"}``. ``invalid`` points failed validation (a bad combination) and never ran;
``error`` points crashed while running. Neither stops the sweep.

results.csv columns: ``point_id``, the grid keys, ``status``, ``error``, then the run's
summary.json flattened with dots (``ttft_s.p99``, ``kv.mean_token_fraction``, ...): new
summary keys become new columns with no change here; last ``identical_to`` and
``identical_note``: for a point whose results are identical to other points', the first such
point's id and why (sim/sweep/identical.py), else empty. ``sim_wall_s`` (a wall-clock time)
is left out so the file depends only on the inputs: the same sweep gives the same bytes
with either executor.
"""

from __future__ import annotations

import csv
import io
import json
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import ConfigError
from sim.sweep.grid import SweepPlan, SweepPoint
from sim.sweep.identical import IDENTICAL_COLUMNS, identical_columns
from sim.outputs.files import flatten, write_atomic


def run_point(point_id: str, values: dict, data: dict, source: str) -> dict:
    """Simulate one point; never raises (a crash becomes an ``error`` record).

    Top-level and free of globals so process pools and Ray can ship it.
    """
    from sim.engine.simulation import Simulation
    from sim.engine.logs.metrics import summarize
    from sim.config.scenario import parse_scenario

    record = {"point_id": point_id, "values": values, "status": "ok", "error": None, "summary": None}
    try:
        sc = parse_scenario(data, source)
        if sc.engine.pipeline_parallel_size > 1:  # pipeline parallelism (sim/engine/pipeline/simulation.py, #15)
            from sim.engine.pipeline.simulation import PipelineSimulation
            from sim.engine.pipeline.summary import summarize_pipeline

            record["summary"] = summarize_pipeline(PipelineSimulation(sc).run())
        elif sc.cluster.num_replicas > 1:  # replicas behind a router: sweepable like any key
            from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster

            record["summary"] = summarize_cluster(ClusterSimulation(sc).run())
        else:
            record["summary"] = summarize(Simulation(sc).run())
    except Exception as exc:  # noqa: BLE001 -- any crash is recorded, the sweep goes on
        record.update(status="error", error=f"{type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc())
    return record


def invalid_record(point: SweepPoint) -> dict:
    return {"point_id": point.point_id, "values": point.values, "status": "invalid",
            "error": point.error, "summary": None}


def points_dir(out_dir: Path) -> Path:
    return out_dir / "points"


def save_record(out_dir: Path, record: dict) -> None:
    write_atomic(points_dir(out_dir) / f"{record['point_id']}.json", json.dumps(record, indent=1) + "\n")


def point_files(out_dir: Path) -> list[Path]:
    folder = points_dir(out_dir)
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def load_records(out_dir: Path) -> dict[str, dict]:
    """Finished records by point id.

    A point file is only ever written whole (atomically), so one that cannot be read, is
    not JSON, or lacks a key or has a wrong type was edited or comes from elsewhere: it is
    a ConfigError naming the file (delete it to rerun its point), never silently reused
    or recomputed.
    """
    found = {}
    for path in point_files(out_dir):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            _bad_record(path, "<file>", f"cannot read it ({getattr(exc, 'strerror', None) or exc})")
        except ValueError as exc:
            _bad_record(path, "<json>", f"not valid JSON ({exc})")
        check_record(path, rec)
        found[path.stem] = rec
    return found


_RECORD_KEYS = ("point_id", "values", "status", "error", "summary")
_STATUSES = ("ok", "invalid", "error")


def _bad_record(path: Path, key: str, what: str):
    raise ConfigError(str(path), key, f"{what}; a point file holds {', '.join(_RECORD_KEYS)}: "
                      "delete it to rerun its point")


def check_record(path: Path, rec) -> None:
    """The keys and types :func:`results_rows` and whatif.html rely on."""
    if not isinstance(rec, dict):
        _bad_record(path, "<top>", "expected a JSON object")
    for key in _RECORD_KEYS:
        if key not in rec:
            _bad_record(path, key, "required key is missing")
    if rec["point_id"] != path.stem:
        _bad_record(path, "point_id", f"{rec['point_id']!r} is not the file's name {path.stem!r}")
    if not isinstance(rec["values"], dict):
        _bad_record(path, "values", "expected an object of grid key -> value")
    if rec["status"] not in _STATUSES:
        _bad_record(path, "status", f"got {rec['status']!r}, expected one of {', '.join(_STATUSES)}")
    if rec["error"] is not None and not isinstance(rec["error"], str):
        _bad_record(path, "error", f"expected text or null, got {type(rec['error']).__name__}")
    summary = rec["summary"]
    if rec["status"] == "ok" and not isinstance(summary, dict):
        _bad_record(path, "summary", "an ok point needs its summary object")
    if summary is not None and not isinstance(summary, dict):
        _bad_record(path, "summary", f"expected an object or null, got {type(summary).__name__}")


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def results_rows(plan: SweepPlan, records: dict[str, dict]) -> tuple[list[str], list[dict]]:
    """Column names and one flat row per point, in grid order (deterministic)."""
    rows, metric_cols = [], {}
    same = identical_columns(plan, records)
    for point in plan.points:
        rec = records.get(point.point_id) or {"status": "missing", "error": "not run", "summary": None}
        flat = flatten(rec["summary"] or {})
        for k in flat:
            metric_cols.setdefault(k, None)
        rows.append({"point_id": point.point_id, **{k: point.values[k] for k in plan.keys},
                     "status": rec["status"], "error": rec["error"], **flat, **same.get(point.point_id, {})})
    cols = ["point_id", *plan.keys, "status", "error", *metric_cols, *IDENTICAL_COLUMNS]
    return cols, rows


def results_csv(plan: SweepPlan, records: dict[str, dict]) -> str:
    cols, rows = results_rows(plan, records)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for row in rows:
        w.writerow([_cell(row.get(c)) for c in cols])
    return buf.getvalue()


@dataclass(frozen=True)
class SweepStats:
    num_points: int
    num_computed: int  # run by the executor in this invocation
    num_reused: int  # finished earlier, taken from DIR/points (--resume)
    num_invalid: int
    num_errors: int  # crashed (this run or reused)
    records: dict = field(default_factory=dict, compare=False, repr=False)  # point id -> record


def run_sweep(plan: SweepPlan, out_dir: Path, executor, *, resume: bool = False,
              on_done=None, plotly: str = "inline") -> SweepStats:
    """Run the plan's pending points with ``executor`` and write results.csv and whatif.html.

    ``executor(tasks, on_result)`` calls ``on_result(record)`` in this process as each
    point finishes; each record is saved at once. ``on_done(record)`` (e.g. a progress
    bar) is called after saving; if it raises (KeyboardInterrupt), what is saved stays.
    ``plotly``: where whatif.html's plotly.js comes from (sim/outputs/plotlyjs.py).
    """
    points_dir(out_dir).mkdir(parents=True, exist_ok=True)
    records = load_records(out_dir) if resume else {}
    wanted = {p.point_id for p in plan.points}
    records = {k: v for k, v in records.items() if k in wanted}
    reused = len(records)
    tasks = []
    for p in plan.points:
        if p.point_id in records:
            continue
        if p.error is not None:
            records[p.point_id] = invalid_record(p)
            save_record(out_dir, records[p.point_id])
        else:
            tasks.append((p.point_id, p.values, p.data, plan.scenario_path))
    computed = 0

    def on_result(record: dict) -> None:
        nonlocal computed
        computed += 1
        records[record["point_id"]] = record
        save_record(out_dir, record)
        if on_done is not None:
            on_done(record)

    if tasks:
        executor(tasks, on_result)
    write_atomic(out_dir / "results.csv", results_csv(plan, records))
    from sim.outputs.plotlyjs import script_tag
    from sim.sweep.whatif import render_whatif

    write_atomic(out_dir / "whatif.html", render_whatif(plan, records, script_tag(plotly, out_dir)))
    statuses = [records[p.point_id]["status"] for p in plan.points]
    return SweepStats(len(plan.points), computed, reused, statuses.count("invalid"), statuses.count("error"),
                      records)

"""Writing a run's files: summary.json, requests.csv, steps.csv (atomic, UTF-8)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from sim.engine.metrics import COLUMNS, request_latencies

REQUEST_COLUMNS = (
    "request_id", "session_id", "turn", "status", "reject_reason", "arrival_s", "admitted_s",
    "first_token_s", "last_token_s", "finish_s", "num_prompt_tokens", "prefix_tokens",
    "num_cached_tokens", "max_tokens", "num_output_tokens", "ttft_s", "tpot_s", "e2e_s",
    "num_preemptions", "num_swaps",
)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers never see a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


#: Summary keys that measure the machine, not the scenario (left out of flattened summaries,
#: so a sweep's results.csv depends only on its inputs).
WALL_CLOCK_KEYS = {"sim_wall_s"}


def flatten(doc: dict, prefix: str = "") -> dict:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists become JSON text."""
    flat = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        elif name not in WALL_CLOCK_KEYS:
            flat[name] = json.dumps(value) if isinstance(value, list) else value
    return flat


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def requests_csv(requests) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(REQUEST_COLUMNS)
    for r in requests:
        ttft, tpot, e2e = request_latencies(r)
        w.writerow([_fmt(v) for v in (
            r.request_id, r.session.session_id if r.session else "", r.turn, r.status.value,
            r.reject_reason, r.arrival_s, r.admitted_s, r.first_token_s, r.last_token_s, r.finish_s,
            r.num_prompt_tokens, r.prefix_len, r.num_cached_tokens, r.max_tokens,
            r.num_output_tokens, ttft, tpot, e2e, r.num_preemptions, r.num_swaps)])
    return buf.getvalue()


def steps_csv(step_log) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for row in step_log.rows:
        w.writerow([_fmt(v) for v in row])
    return buf.getvalue()


def write_run(out_dir: Path, summary: dict, result, report_html: str | None) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "summary.json": json.dumps(summary, indent=2, sort_keys=False) + "\n",
        "requests.csv": requests_csv(result.requests),
        "steps.csv": steps_csv(result.steps),
    }
    if report_html is not None:
        files["report.html"] = report_html
    paths = []
    for name, text in files.items():
        write_atomic(out_dir / name, text)
        paths.append(out_dir / name)
    return paths

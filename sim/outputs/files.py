"""Writing a run's files: summary.json, requests.csv, steps.csv (atomic, UTF-8), and the
checks on an output folder made before any work (see :func:`prepare_out_dir`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from sim.errors import ConfigError

from sim.engine.cluster.simulation import ClusterResult
from sim.engine.logs.metrics import COLUMNS
from sim.engine.logs.request_log import STATUSES
from sim.engine.logs.request_stats import RunRequests

from sim.outputs.paths import check_writable, refuse_linked_subfolder  # noqa: F401 (re-exported)

REQUEST_COLUMNS = (
    "request_id", "session_id", "turn", "status", "reject_reason", "arrival_s", "admitted_s",
    "first_token_s", "last_token_s", "finish_s", "num_prompt_tokens", "prefix_tokens",
    "num_cached_tokens", "max_tokens", "num_output_tokens", "ttft_s", "tpot_s", "e2e_s",
    "num_preemptions", "num_swaps",
)


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write ``text`` (a string, or an iterable of pieces written one by one) to ``path``
    so that readers never see a half-written file.

    The text goes to a new temporary file with a unique name, created exclusively in
    ``path``'s folder (``O_EXCL | O_NOFOLLOW``: a symlink planted there is never followed),
    then renamed over ``path`` (a symlink at ``path`` is replaced, not followed). On any
    failure the temporary file is removed and the error raised.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if isinstance(text, str):
                f.write(text)
            else:
                f.writelines(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    if not hasattr(_umask, "value"):
        _umask.value = os.umask(0o022)
        os.umask(_umask.value)
    return _umask.value


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


def requests_csv(requests, replica_of: list[int] | None = None, decode_of: dict[int, int] | None = None) -> str:
    """The whole requests.csv as one string (see :func:`requests_csv_chunks`)."""
    return "".join(requests_csv_chunks(requests, replica_of, decode_of=decode_of))


def _g(values: np.ndarray) -> list[str]:
    """Floats as ``%.6g``, NaN (a time not reached) as empty."""
    return ["" if v != v else f"{v:.6g}" for v in values.tolist()]


def requests_csv_chunks(requests, replica_of: list[int] | None = None, chunk: int = 20_000, *,
                        decode_of: dict[int, int] | None = None) -> Iterator[str]:
    """requests.csv in pieces of ``chunk`` rows, one row per request in arrival order, from
    the run's request columns (sim/engine/logs/request_log.py); ``replica_of`` (a cluster run's
    request id -> replica) adds a ``replica`` column after ``request_id``; ``decode_of`` (a
    disaggregated run's request id -> decode replica; ``replica`` is then the prefill replica)
    a ``decode_replica`` column after it, empty for a request never handed to the decode pool."""
    lead = () if replica_of is None else ("replica",) if decode_of is None else ("replica", "decode_replica")
    cols = (REQUEST_COLUMNS[0], *lead, *REQUEST_COLUMNS[1:])
    yield ",".join(cols) + "\n"
    status_names = [s.value for s in STATUSES]
    n = len(requests)
    for a in range(0, n, chunk):  # each piece reads only its own requests' columns
        b = min(n, a + chunk)
        rr = RunRequests(requests, _REQUEST_FIELDS, a, b)
        c = rr.c
        reasons = [""] + rr.reasons  # code + 1 -> reason (the whole run's codes)

        def ints(name: str) -> list[str]:
            return [str(v) for v in c[name].astype(np.int64).tolist()]

        rid = ints("request_id")
        sid = ["" if v < 0 else str(v) for v in c["session_id"].astype(np.int64).tolist()]
        status = [status_names[v] for v in c["status"].astype(np.int64).tolist()]
        why = [reasons[v + 1] for v in c["reject_reason"].astype(np.int64).tolist()]
        fields = [rid, sid, ints("turn"), status, why, *(_g(c[t]) for t in _REQUEST_TIMES),
                  *(ints(k) for k in _REQUEST_COUNTS), _g(rr.ttft), _g(rr.tpot), _g(rr.e2e),
                  ints("num_preemptions"), ints("num_swaps")]
        if replica_of is not None:
            fields.insert(1, [str(v) for v in replica_of[a:b]])
            if decode_of is not None:
                fields.insert(2, [str(decode_of.get(int(i), "")) for i in rid])
        yield "".join(",".join(row) + "\n" for row in zip(*fields))


_REQUEST_TIMES = ("arrival_s", "admitted_s", "first_token_s", "last_token_s", "finish_s")
_REQUEST_COUNTS = ("num_prompt_tokens", "prefix_len", "num_cached_tokens", "max_tokens", "num_output_tokens")
_REQUEST_FIELDS = ("request_id", "session_id", "turn", *_REQUEST_TIMES, *_REQUEST_COUNTS,
                   "num_preemptions", "num_swaps")


#: ``sim run --steps``: the most rows steps.csv gets (None: every step; 0: no steps.csv).
STEP_MODES = {"full": None, "sampled": 100_000, "none": 0}


def steps_csv_chunks(step_log, max_rows: int | None = None, chunk: int = 20_000) -> Iterator[str]:
    """steps.csv in pieces of ``chunk`` rows (so a long run's file is never all in memory):
    one row per step, times as ``%.6g``, counts as integers; with ``max_rows``, the evenly
    spaced steps :meth:`StepLog.sample_indices` keeps."""
    yield ",".join(COLUMNS) + "\n"
    yield from _step_rows(step_log, max_rows, chunk, "")


def cluster_steps_csv_chunks(step_logs, max_rows: int | None = None, chunk: int = 20_000) -> Iterator[str]:
    """A cluster's steps.csv: every replica's steps (replica 0's first), each row led by its
    ``replica``; with ``max_rows``, each replica keeps at most its share of them."""
    yield "replica," + ",".join(COLUMNS) + "\n"
    share = None if max_rows is None else max(1, max_rows // len(step_logs))
    for i, log in enumerate(step_logs):
        yield from _step_rows(log, share, chunk, f"{i},")


#: ``str(i)`` for the small counts most steps.csv columns hold.
_SMALL_INTS = [str(i) for i in range(1 << 14)]


def _step_rows(step_log, max_rows: int | None, chunk: int, lead: str) -> Iterator[str]:
    """The rows, each led by ``lead`` (a replica's ``"i,"``, or nothing), built column by
    column (each formatted as a list, then the rows zipped and joined)."""
    k = step_log.sample_stride(max_rows)
    chunk = -(-chunk // k) * k  # chunks start on kept steps
    for start in range(0, len(step_log), chunk):
        part = step_log.table(start, start + chunk)[::k]
        if not len(part):
            continue
        cols = [[format(v, ".6g") for v in part[:, j].tolist()] for j in (0, 1)]
        counts = part[:, 2:].astype(np.int64)
        low, high = counts.min(axis=0).tolist(), counts.max(axis=0).tolist()
        for col, lo, hi in zip(counts.T.tolist(), low, high):
            # most counts are small: their strings are looked up, not made (6x faster)
            cols.append(list(map(_SMALL_INTS.__getitem__, col) if lo >= 0 and hi < len(_SMALL_INTS)
                             else map(str, col)))
        if lead:
            cols.insert(0, [lead[:-1]] * len(part))
        yield "\n".join(map(",".join, zip(*cols))) + "\n"


def steps_csv(step_log, max_rows: int | None = None) -> str:
    """The whole steps.csv as one string (see :func:`steps_csv_chunks`)."""
    return "".join(steps_csv_chunks(step_log, max_rows))


def run_files(steps: str = "full", report: bool = True, schedule: bool = False,
              plotly_copy: bool = False) -> list[str]:
    """The files ``sim run`` writes with ``--steps steps`` (and a report or not, and
    ``--schedule``'s schedule.jsonl or not, and ``--plotly folder``'s plotly.min.js or not)."""
    return [f for f in RUN_FILES if not (f == "report.html" and not report)
            and not (f == "plotly.min.js" and not plotly_copy)
            and not (f == "steps.csv" and STEP_MODES[steps] == 0)
            and not (f == "schedule.jsonl" and not schedule)]


def write_run(out_dir: Path, summary: dict, result, report_html: str | None,
              stale: Iterable[Path] = (), steps: str = "full") -> list[Path]:
    """Write a run's files into ``out_dir`` (see :func:`write_outputs`; ``stale`` are an
    earlier run's files this run does not write, from :func:`prepare_out_dir`). ``steps``:
    a key of :data:`STEP_MODES` (``none``: no steps.csv)."""
    replicas = result.replica_of if isinstance(result, ClusterResult) else None  # sim/engine/cluster/simulation.py
    handoff = getattr(result, "handoff", None)  # disaggregated prefill/decode: sim/engine/disagg/handoff.py
    files = {
        "summary.json": json.dumps(summary, indent=2, sort_keys=False) + "\n",
        "requests.csv": requests_csv_chunks(result.requests, replicas,
                                            decode_of=handoff.decode_of if handoff is not None else None),
    }
    if STEP_MODES[steps] != 0:
        files["steps.csv"] = (steps_csv_chunks(result.steps, STEP_MODES[steps]) if replicas is None else
                              cluster_steps_csv_chunks([r.steps for r in result.replicas], STEP_MODES[steps]))
    if report_html is not None:
        files["report.html"] = report_html
    return write_outputs(out_dir, files, stale)


# --- output folders: where a command writes, checked before any work ---------------------

#: The files each command writes into its output folder; a folder holding any of them (or
#: a sweep's points/) holds another run's files.
RUN_FILES = ("summary.json", "requests.csv", "steps.csv", "report.html", "schedule.jsonl", "plotly.min.js")
VALIDATE_FILES = ("validation.json", "validation_steps.csv", "validation.html")
SWEEP_FILES = ("results.csv", "whatif.html")
OUTPUT_FILES = RUN_FILES + VALIDATE_FILES + SWEEP_FILES

_UNSAFE = re.compile(r"[^\w.+-]+")


def safe_name(name: str, fallback: str = "scenario") -> str:
    """One safe folder name from a scenario's ``name``: separators and other unsafe
    characters become ``-``, leading and trailing dots and dashes go (``../../x`` -> ``x``,
    ``/tmp/y`` -> ``tmp-y``); an empty result is ``fallback``."""
    clean = _UNSAFE.sub("-", str(name)).strip(".-")[:120].strip(".-")
    return clean or fallback


def prepare_out_dir(out: Path, writes: Iterable[str], *, force: bool, flag: str = "--out",
                    known: Iterable[str] = OUTPUT_FILES) -> list[Path]:
    """Check an output folder before any work; return the files to remove once written.

    ``out`` must be a folder (or not exist yet) that can be written. A folder already
    holding another run's files (``known``: :data:`OUTPUT_FILES`, or ``sim plan``'s)
    is refused unless ``force``; then the
    old files this run does not write (``writes``) are returned, for :func:`remove_files`
    after the new ones are written, so the folder never mixes two runs. Other files in
    the folder are never touched. A sweep folder (``points/``) is always refused.
    """
    out = Path(out)
    writes = set(writes)
    if out.is_symlink() and not out.exists():
        raise ConfigError(str(out), flag, f"is a symlink to {os.readlink(out)}, which does not exist; remove "
                          "the link or choose another folder")
    if out.exists() and not out.is_dir():
        raise ConfigError(str(out), flag, "is an existing file; give a folder (a new one, or "
                          "one holding an earlier run with --force)")
    check_writable(out, flag)
    if not out.is_dir():
        return []
    if (out / "points").is_dir():
        raise ConfigError(str(out), flag, "holds a sweep (points/); choose another folder")
    for name in writes:
        if (out / name).is_dir():
            raise ConfigError(str(out / name), flag, "is a folder where a file is to be written; "
                              "choose another folder")
    old = [out / n for n in known if (out / n).exists() or (out / n).is_symlink()]
    if old and not force:
        raise ConfigError(str(out), flag, f"already holds another run's files ({', '.join(p.name for p in old)}); "
                          "pass --force to replace them, or choose another folder")
    return [p for p in old if p.name not in writes]


def remove_files(paths: Iterable[Path]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def write_outputs(out_dir: Path, files: dict[str, str | Iterable[str]], stale: Iterable[Path] = (),
                  flag: str = "--out") -> list[Path]:
    """Write ``files`` (name -> text, or its pieces) atomically into ``out_dir``, then remove ``stale``;
    a failed write is one ConfigError line, not a traceback."""
    out_dir = Path(out_dir)
    paths = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            write_atomic(out_dir / name, text)
            paths.append(out_dir / name)
        remove_files(stale)
    except OSError as exc:
        raise ConfigError(str(getattr(exc, "filename", None) or out_dir), flag,
                          f"cannot write: {exc.strerror or exc}") from None
    return paths

"""The per-step log of a run: 17 numbers a step, kept as columns, spilled to disk when long.

Every step appends one row (:data:`COLUMNS`): the two times and swap_bytes as doubles, the
14 counts as 32-bit integers (64-bit once the KV pool has 2**31 slots or more): 80 bytes.
A long run has millions of steps (a million chatbot requests: 8.7 million, 0.7 GB), so
once :data:`SPILL_ROWS` rows are in memory they are written to an anonymous temporary
file and memory starts again from empty; readers get them back in pieces
(:meth:`StepLog.chunks`, :meth:`StepLog.table`), the summary sums over the pieces
(:func:`step_aggregates`) and the report reads a condensed log (:meth:`StepLog.condensed`).
A log that never spilled reads as before: views of its arrays, no copies.
"""

from __future__ import annotations

import tempfile
from array import array
from struct import error as _PackError, pack as _pack
from collections.abc import Iterator

import numpy as np

from sim.kv.paged import PagedAllocator
from sim.views import IndexedSequence

COLUMNS = (
    "time_s", "duration_s", "num_seqs", "num_prefill_tokens", "num_decode_tokens",
    "num_padding_tokens", "num_waiting", "num_running", "num_swapped", "num_preempted",
    "swap_bytes", "kv_token_slots", "kv_allocated_slots", "kv_reserved_slots",
    "kv_internal_frag_slots", "kv_external_frag_slots", "kv_cached_free_slots",
)
_NCOLS = len(COLUMNS)
#: Kept as doubles: the two times, and swap_bytes (a step may move more than 2**31 bytes);
#: the rest are counts.
_FLOAT_COLS = (0, 1, 10)
_COUNT_COLS = tuple(i for i in range(_NCOLS) if i not in _FLOAT_COLS)
#: Summed, not averaged, when steps are condensed: events and traffic of the merged steps.
_SUMMED = ("duration_s", "num_preempted", "swap_bytes")

#: Rows kept in memory before they are written out (80 MB of rows).
SPILL_ROWS = 1 << 20
#: Rows read back from disk at a time (about 20 MB).
READ_ROWS = 1 << 18


class _Rows(IndexedSequence):
    """A read-only view of a :class:`StepLog` as one tuple per step (as the log was once
    kept): ``rows[-1]``, ``len(rows)``, iteration. Counts come back as ints."""

    _what = "step"

    def __init__(self, log: StepLog) -> None:
        self._log = log

    def __len__(self) -> int:
        return len(self._log)

    def _item(self, i: int) -> tuple:
        return self._log.row(i)


class _Spill:
    """Rows written out: one anonymous temporary file (deleted when closed or when the
    process ends), pieces of doubles then counts, each piece's place and count type."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(prefix="kvsim-steps-")
        self.pieces: list[tuple[int, int, int, str]] = []  # (first row, rows, file offset, count typecode)
        self.rows = 0

    def write(self, f: array, c: array) -> None:
        n = len(f) // 3
        self.file.seek(0, 2)  # the end (a read may have moved the position)
        self.pieces.append((self.rows, n, self.file.tell(), c.typecode))
        f.tofile(self.file)
        c.tofile(self.file)
        self.rows += n

    def read(self, piece: tuple[int, int, int, str], a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``a`` to ``b`` (within the piece) as (doubles, counts in the piece's width)."""
        _, n, offset, typecode = piece
        size = 4 if typecode == "i" else 8
        self.file.seek(0)  # np.fromfile's offset counts from the current position
        f = np.fromfile(self.file, dtype=float, count=3 * (b - a), offset=offset + 24 * a)
        self.file.seek(0)
        c = np.fromfile(self.file, dtype=np.int32 if size == 4 else np.int64, count=14 * (b - a),
                        offset=offset + 24 * n + 14 * size * a)
        return f.reshape(-1, 3), c.reshape(-1, 14)


class StepLog:
    """Columns of per-step numbers, appended as the run goes (see the module docstring).
    ``table`` and ``array`` give them back as numbers of either kind (a count's value is
    exact)."""

    def __init__(self) -> None:
        self._f = array("d")  # per step: time_s, duration_s, swap_bytes
        self._c = array("i")  # per step: the counts, COLUMNS order (made "q" for huge pools)
        self._spill: _Spill | None = None

    def __len__(self) -> int:
        return len(self._f) // 3 + (self._spill.rows if self._spill is not None else 0)

    @property
    def spilled(self) -> bool:
        """Whether some rows are on disk (readers then get copies, never views)."""
        return self._spill is not None

    @property
    def rows(self) -> _Rows:
        """The steps as tuples (a view; see :class:`_Rows`)."""
        return _Rows(self)

    def row(self, i: int) -> tuple:  # COLUMNS order, counts as ints
        if self._spill is not None:
            return tuple(float(v) if j < 2 else int(v) for j, v in enumerate(self.table(i, i + 1)[0]))
        f = self._f[3 * i:3 * i + 3]
        c = self._c[14 * i:14 * i + 14]
        return (f[0], f[1], *c[:8], int(f[2]), *c[8:])

    def append(self, now, duration, num_seqs, num_prefill, num_decode, padding, waiting, running,
               swapped, preempted, swap_bytes, token_slots, allocated, reserved, internal, external,
               cached_free) -> None:
        """One step's row (COLUMNS order)."""
        self.append_rows((now, duration, swap_bytes), (
            num_seqs, num_prefill, num_decode, padding, waiting, running, swapped, preempted,
            token_slots, allocated, reserved, internal, external, cached_free))

    def append_rows(self, doubles: list, counts: list) -> None:
        """Several rows at once: ``doubles`` holds 3 floats a row (now, duration, swap bytes),
        ``counts`` 14 integers a row, both in COLUMNS order (macro-steps)."""
        # struct.pack converts a list of numbers 1.5-2.5x faster than array.fromlist (whose
        # per-item conversion parses arguments), into the same machine values
        c = self._c
        try:
            c.frombytes(_pack(f"{len(counts)}{c.typecode}", *counts))
        except _PackError:  # out of range (or not integers): the array's own conversion says which
            counts = counts if type(counts) is list else list(counts)
            try:
                c.fromlist(counts)
            except OverflowError:  # a pool of 2**31 slots or more: 64-bit counts from now on
                self._c = array("q", c[:14 * (len(self._f) // 3)])
                self._c.fromlist(counts)
        try:
            self._f.frombytes(_pack(f"{len(doubles)}d", *doubles))
        except _PackError:
            self._f.fromlist(doubles if type(doubles) is list else list(doubles))
        if len(self._f) >= 3 * SPILL_ROWS:
            self._write_out()

    def record(self, now: float, duration: float, out, sched, allocator: KVAllocator) -> None:
        reserved = internal = empty = 0
        kept = allocator.kept_tokens
        bounded = allocator.budget.max_tokens is not None
        running = sched.running
        if type(allocator) is PagedAllocator:  # held_slots inlined: len(table) x block_size
            tables, B = allocator.block_tables, allocator.block_size
            helds = [len(tables.get(r.request_id, ())) * B for r in running]
        else:
            helds = [allocator.held_slots(r) for r in running]
        for req, held in zip(running, helds):
            computed = req.num_computed_tokens
            final = req.num_prompt_tokens + req.num_output_tokens  # final_num_tokens
            if bounded:  # a token budget: only kept tokens hold KV
                computed, final = kept(computed), kept(final)
            filled_to = held if held < final else final
            reserved += filled_to - computed
            internal += held - filled_to
            empty += held - computed
        for req in getattr(sched, "done_in_batch", ()):  # static batch padding rows
            waste = allocator.held_slots(req) - kept(req.num_computed_tokens)
            internal += waste
            empty += waste
        allocated = allocator.num_allocated_slots()
        self.append(
            now, duration, out.num_seqs, out.num_prefill_tokens, out.num_decode_tokens,
            out.prefill_padding_tokens + out.decode_padding_seqs, len(sched.waiting),
            len(sched.running), len(sched.swapped), len(out.preempted),
            out.swap_out_bytes + out.swap_in_bytes, allocated - empty, allocated, reserved,
            internal, allocator.num_external_fragmentation_slots(),
            allocator.num_cached_free_slots(),
        )

    def _write_out(self) -> None:
        if self._spill is None:
            self._spill = _Spill()
        self._spill.write(self._f, self._c)
        self._f, self._c = array("d"), array(self._c.typecode)

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Rows ``start`` to ``stop`` as (doubles, counts) pieces: views of the rows in
        memory, copies of those read back from disk."""
        if self._spill is not None:
            for piece in self._spill.pieces:
                first, n = piece[0], piece[1]
                a, b = max(start, first), min(stop, first + n)
                if a < b:
                    yield self._spill.read(piece, a - first, b - first)
        base = self._spill.rows if self._spill is not None else 0
        a, b = max(start, base), stop
        if a < b or (self._spill is None and a == b):
            f = np.frombuffer(self._f, dtype=float).reshape(-1, 3) if len(self._f) else np.zeros((0, 3))
            c = (np.frombuffer(self._c, dtype=np.int32 if self._c.typecode == "i" else np.int64).reshape(-1, 14)
                 if len(self._c) else np.zeros((0, 14), dtype=np.int32))
            yield f[a - base:b - base], c[a - base:b - base]

    def _views(self, start: int = 0, stop: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        n = len(self)
        stop = n if stop is None else min(stop, n)
        pieces = list(self._pieces(start, stop))
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return np.zeros((0, 3)), np.zeros((0, 14), dtype=np.int64)
        return np.concatenate([f for f, _ in pieces]), np.concatenate([c for _, c in pieces])  # widest ints

    def table(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Steps ``start`` to ``stop`` as a (steps x columns) float array (a copy: the log
        may grow on)."""
        f, c = self._views(start, stop)
        out = np.empty((len(f), _NCOLS), dtype=float)
        out[:, _FLOAT_COLS] = f
        out[:, _COUNT_COLS] = c
        return out

    def array(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Each column as an array: float for the times and swap_bytes, integer for the
        counts. With ``copy`` False, views of the log itself (no memory; for a finished run
        only: the log cannot grow while such a view is alive) unless it spilled to disk."""
        return _columns(*self._views(), copy=copy and not self.spilled)

    def chunks(self, rows: int = READ_ROWS) -> Iterator[dict[str, np.ndarray]]:
        """The log as column dicts, in order: one piece, the log itself without copies, when
        it never spilled; else pieces of at most ``rows`` steps read back from disk."""
        n = len(self)
        if not self.spilled:
            yield self.array(copy=False)
            return
        for start in range(0, n, rows):
            yield _columns(*self._views(start, start + rows), copy=False)

    def condensed(self, max_rows: int = 200_000) -> dict[str, np.ndarray]:
        """At most ``max_rows`` rows for figures: the log itself when it fits (no copy), else
        runs of k consecutive steps merged into one row: the run's end time, its summed
        duration, preemptions and swap bytes, and its other counts averaged over time (as
        floats). Time-weighted means over whole runs of steps are unchanged by merging."""
        n = len(self)
        if n <= max_rows:
            return self.array(copy=not self.spilled)
        k = -(-n // max_rows)
        parts: list[dict[str, np.ndarray]] = []
        for chunk in self.chunks(-(-READ_ROWS // k) * k):  # whole runs per chunk
            m = chunk["time_s"].size
            edges = np.arange(0, m, k)
            dur = chunk["duration_s"]
            w = np.add.reduceat(dur, edges)
            safe = np.where(w > 0, w, 1.0)
            out = {"time_s": chunk["time_s"][np.minimum(edges + k, m) - 1]}
            for name in COLUMNS[1:]:
                col = chunk[name]
                out[name] = (np.add.reduceat(col.astype(float), edges) if name in _SUMMED
                             else np.add.reduceat(col * dur, edges) / safe)
            parts.append(out)
        return {name: np.concatenate([p[name] for p in parts]) for name in COLUMNS}

    def sample_stride(self, max_rows: int | None) -> int:
        """A sampled ``steps.csv`` keeps every k-th step from the first: k = 1 when the log
        has at most ``max_rows`` steps (or ``max_rows`` is None), else ceil(n / max_rows)."""
        n = len(self)
        return 1 if max_rows is None or n <= max_rows else -(-n // max_rows)

    def sample_indices(self, max_rows: int | None) -> np.ndarray:
        """The steps a sampled ``steps.csv`` keeps (see :meth:`sample_stride`)."""
        return np.arange(0, len(self), self.sample_stride(max_rows))


def _columns(f: np.ndarray, c: np.ndarray, copy: bool) -> dict[str, np.ndarray]:
    if copy:
        f, c = f.copy(), c.copy()
    cols = {COLUMNS[j]: f[:, k] for k, j in enumerate(_FLOAT_COLS)}
    cols.update({COLUMNS[j]: c[:, k] for k, j in enumerate(_COUNT_COLS)})
    return {name: cols[name] for name in COLUMNS}


def step_aggregates(log: StepLog, pool: int) -> dict[str, float]:
    """What summary.json reads from the steps, summed over the log's pieces: the step count,
    busy time, the time integrals (sum of value x duration) of the KV columns, and peaks."""
    keys = ("token", "reserved", "internal", "external", "free", "alloc", "alloc_unused")
    acc = {"num_steps": 0, "busy": 0.0, **{k: 0.0 for k in keys},
           "peak_alloc": 0, "peak_token": 0, "peak_running": 0, "peak_waiting": 0}
    for s in log.chunks():
        dur = s["duration_s"]
        if not dur.size:
            continue
        token, alloc, external = s["kv_token_slots"], s["kv_allocated_slots"], s["kv_external_frag_slots"]
        acc["num_steps"] += len(dur)
        acc["busy"] += dur.sum()
        for key, col in (("token", token), ("reserved", s["kv_reserved_slots"]),
                         ("internal", s["kv_internal_frag_slots"]), ("external", external),
                         ("free", pool - alloc - external), ("alloc", alloc), ("alloc_unused", alloc - token)):
            acc[key] += (col * dur).sum()
        for key, col in (("peak_alloc", alloc), ("peak_token", token), ("peak_running", s["num_running"]),
                         ("peak_waiting", s["num_waiting"])):
            acc[key] = max(acc[key], int(col.max()))
    return acc

"""Numeric columns of a user's CSV file (traces, empirical length distributions), read safely.

The file must be a regular file of at most MAX_CSV_BYTES, UTF-8, with a header row and at
most MAX_SESSIONS data rows, each with as many cells as the header; every cell of the
columns read must be a finite number in [0, MAX_CELL]. Errors name the file, the line and
the column, and never echo the file's content (a path such as ``/proc/self/environ`` must
not print the environment): not its cells, not its header.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim.config.limits import MAX_SESSIONS
from sim.errors import ConfigError, decode_utf8, read_bytes

#: Largest CSV read (the Azure hour of 19,366 requests is 0.4 MB; MAX_SESSIONS rows fit).
MAX_CSV_BYTES = 128 << 20
#: Largest value of any cell read (times in seconds, token counts).
MAX_CELL = 1e15


@dataclass(frozen=True)
class Columns:
    """The columns read, in the order asked, and each data row's line number in the file."""

    values: tuple[np.ndarray, ...]
    lines: np.ndarray

    def where(self, index: int, column: str) -> str:
        """The key of a cell in error messages: ``line N, column NAME``."""
        return f"line {int(self.lines[index])}, column {column}"


def has_columns(path: str, columns: tuple[str, ...]) -> tuple[bool, ...]:
    """Whether the CSV's header names each of ``columns`` (the file checked as read_columns does);
    the header is cached as read_columns's columns are, so a trace's file is not read once per
    question (the loader's and the run summary's)."""
    header = _header(path, _stamp(path))
    return tuple(c in header for c in columns)


def _stamp(path: str):
    """(size, mtime) of ``path``: the caches' key, so an edited file is read again."""
    import os  # noqa: PLC0415

    try:
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    except (OSError, ValueError):
        return None  # read_bytes reports it


@lru_cache(maxsize=16)
def _header(path: str, stamp) -> tuple[str, ...]:
    text = decode_utf8(read_bytes(path, max_bytes=MAX_CSV_BYTES, what="CSV file"), path)
    for row in csv.reader(io.StringIO(text, newline="")):
        if row:
            return tuple(row)
    return ()


def read_columns(path: str, columns: tuple[str, ...]) -> Columns:
    """The named numeric columns of the CSV at ``path`` (ConfigError on any problem); cached
    while the file's size and modification time stay the same."""
    return _read_columns(path, tuple(columns), _stamp(path))


@lru_cache(maxsize=16)
def _read_columns(path: str, columns: tuple[str, ...], stamp) -> Columns:
    text = decode_utf8(read_bytes(path, max_bytes=MAX_CSV_BYTES, what="CSV file"), path)
    try:
        fast = _read_valid(text, columns)
    except csv.Error:
        fast = None
    return fast if fast is not None else _read_checked(text, path, columns)


#: Rows converted at a time by ``_read_valid`` (the rows themselves are not all kept).
_ROWS_PER_CHUNK = 1 << 16


def _read_valid(text: str, columns: tuple[str, ...]) -> Columns | None:
    """The columns of a file with no problem at all, each column converted by one ``map(float)``
    and checked by whole arrays; None at the first doubt (``_read_checked`` then reads the file
    cell by cell and reports its first problem). The same floats: ``float`` of the same cells."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    while header is not None and not header:
        header = next(reader, None)
    if header is None or any(column not in header for column in columns):
        return None
    index, width = [header.index(column) for column in columns], len(header)
    values: list[list[float]] = [[] for _ in columns]
    lines: list[int] = []
    chunk: list[list[str]] = []
    for row in reader:
        if row:
            if len(row) != width:
                return None
            chunk.append(row)
            lines.append(reader.line_num)
            if len(chunk) == _ROWS_PER_CHUNK:
                if not _convert(chunk, index, values):
                    return None
                chunk = []
    if not lines or len(lines) > MAX_SESSIONS or not _convert(chunk, index, values):
        return None
    arrays = tuple(np.array(v, dtype=float) for v in values)
    for a in arrays:
        if not (np.isfinite(a).all() and (a >= 0).all() and (a <= MAX_CELL).all()):
            return None
    return Columns(arrays, np.array(lines, dtype=np.int64))


def _convert(rows: list[list[str]], index: list[int], values: list[list[float]]) -> bool:
    """Append each row's cells at ``index`` to ``values`` as floats; False if one is no number."""
    try:
        for out, i in zip(values, index):
            out.extend(map(float, [row[i] for row in rows]))
    except ValueError:
        return False
    return True


def _read_checked(text: str, path: str, columns: tuple[str, ...]) -> Columns:
    """The columns, read and checked cell by cell: a ConfigError names the first problem."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        while header is not None and not header:  # blank lines before the header
            header = next(reader, None)
        if header is None:
            raise ConfigError(path, "<file>", f"empty file; expected a header row naming the columns "
                              f"{', '.join(columns)} and one row per value")
        index = []
        for column in columns:
            if column not in header:
                raise ConfigError(path, column, "no such column in the file's header row (its first line)")
            index.append(header.index(column))
        cells: list[list[float]] = [[] for _ in columns]
        lines = []
        for row in reader:
            if not row:
                continue  # a blank line
            where = reader.line_num
            if len(row) != len(header):
                raise ConfigError(path, f"line {where}", f"{len(row)} cells, but the header has "
                                  f"{len(header)}; every row needs one cell per column")
            if len(lines) >= MAX_SESSIONS:
                raise ConfigError(path, f"line {where}", f"more than {MAX_SESSIONS} data rows; the most allowed")
            for out, column, i in zip(cells, columns, index):
                out.append(_cell(row[i], path, where, column))
            lines.append(where)
    except csv.Error as exc:
        raise ConfigError(path, f"line {reader.line_num}", f"malformed CSV ({exc})") from None
    if not lines:
        raise ConfigError(path, "<file>", "the file has a header but no data rows")
    return Columns(tuple(np.array(c, dtype=float) for c in cells), np.array(lines, dtype=np.int64))


def _cell(raw: str, path: str, line: int, column: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(path, f"line {line}, column {column}", "not a number") from None
    if not math.isfinite(value):
        raise ConfigError(path, f"line {line}, column {column}", "not a finite number")
    if value < 0:
        raise ConfigError(path, f"line {line}, column {column}", "negative; allowed: numbers >= 0")
    if value > MAX_CELL:
        raise ConfigError(path, f"line {line}, column {column}", f"above the ceiling {MAX_CELL:g}")
    return value

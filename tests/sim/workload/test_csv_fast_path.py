"""sim/workload/csvfile.py reads a valid file through ``_read_valid`` (whole columns at once) and
anything else through ``_read_checked`` (cell by cell): the two must give the same columns, and
every problem must reach the checked path, whose error names it."""

from __future__ import annotations

import numpy as np
import pytest

from sim.errors import ConfigError
from sim.workload import csvfile

COLS = ("t", "n")


def _both(text: str, columns=COLS):
    return csvfile._read_valid(text, columns), csvfile._read_checked(text, "f.csv", columns)


@pytest.mark.parametrize("text", [
    "t,n,x\n0.0,5,a\n1.5,7,b\n",
    "\n\nt,n\n0,1\n\n2.25,3\n",  # blank lines before the header and between rows
    't,n\n"1.0",2\n3,"4"\n',  # quoted cells
    't,n\n1e3,-0\n 2 ,1_000\n',  # what float() takes: exponents, a negative zero, spaces, underscores
    'note,t,n\n"two\nlines",1,2\n"x",3,4\n',  # a quoted newline: line numbers count physical lines
])
def test_the_fast_path_reads_what_the_checked_one_reads(text):
    fast, checked = _both(text)
    assert fast is not None
    assert len(fast.values) == len(checked.values) == 2
    for a, b in zip(fast.values, checked.values):
        assert a.dtype == b.dtype == np.float64
        assert a.tobytes() == b.tobytes()  # the same floats, bit for bit
    assert fast.lines.dtype == checked.lines.dtype and fast.lines.tolist() == checked.lines.tolist()


def test_chunks_join_in_order(monkeypatch):
    monkeypatch.setattr(csvfile, "_ROWS_PER_CHUNK", 3)
    text = "t,n\n" + "".join(f"{i * 0.1},{i}\n" for i in range(10))
    fast, checked = _both(text)
    assert fast.values[1].tolist() == list(range(10)) == checked.values[1].tolist()
    assert fast.lines.tolist() == list(range(2, 12))


@pytest.mark.parametrize("text,key", [
    ("", "<file>"),
    ("t,n\n", "<file>"),
    ("t,x\n1,2\n", "n"),
    ("t,n\n1,2\n3\n", "line 3"),
    ("t,n\n1,abc\n", "line 2, column n"),
    ("t,n\n1,2\nnan,2\n", "line 3, column t"),
    ("t,n\ninf,2\n", "line 2, column t"),
    ("t,n\n-1,2\n", "line 2, column t"),
    ("t,n\n1,2e16\n", "line 2, column n"),
    ("t,n\n1,2\n3,x\n4,5,6\n", "line 3, column n"),  # the first problem, in file order
])
def test_every_problem_goes_to_the_checked_path(text, key):
    assert csvfile._read_valid(text, COLS) is None
    with pytest.raises(ConfigError) as err:
        csvfile._read_checked(text, "f.csv", COLS)
    assert err.value.key == key


def test_too_many_rows_go_to_the_checked_path(monkeypatch):
    monkeypatch.setattr(csvfile, "MAX_SESSIONS", 2)
    text = "t,n\n1,1\n2,2\n3,3\n"
    assert csvfile._read_valid(text, COLS) is None
    with pytest.raises(ConfigError, match="more than 2 data rows"):
        csvfile._read_checked(text, "f.csv", COLS)
    assert csvfile._read_valid("t,n\n1,1\n2,2\n", COLS) is not None


def test_a_file_is_read_through_the_fast_path(tmp_path, monkeypatch):
    path = tmp_path / "trace.csv"
    path.write_text("t,n\n0.5,3\n")
    calls = []
    monkeypatch.setattr(csvfile, "_read_checked", lambda *a: calls.append(a))
    cols = csvfile.read_columns(str(path), COLS)
    assert cols.values[0].tolist() == [0.5] and cols.values[1].tolist() == [3.0] and not calls

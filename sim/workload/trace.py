"""Reading a trace (``workload.trace``): arrival times, prompt and output lengths, and the
prompts' optional prefix identity, checked cell by cell (one error line naming the file,
the line and the column).

A prefix identity takes two forms, which a trace may mix row by row:

* ``prefix_group, prefix_tokens``: rows of the same group (> 0) share the first
  ``prefix_tokens`` tokens of their prompts (as far as both have them): the group's stream is
  one segment (sim/request.py), a system prompt, a conversation;
* ``prefix_parent, prefix_tokens``: the row's prompt begins with the first ``prefix_tokens``
  tokens of data row ``prefix_parent``'s prompt (1: the first data row; an earlier row), and
  the rest is its own: a tree of prompts, as ``sim serve`` records what its clients sent
  (its arrivals.csv). The row's prefix is then that row's segments, cut at ``prefix_tokens``.

Either way ``prefix_tokens`` is less than ``num_prefill_tokens``: the prompt keeps a token of
its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.config.limits import MAX_DURATION_S, MAX_SESSIONS, MAX_TOKENS
from sim.errors import ConfigError
from sim.workload.csvfile import has_columns, read_columns

#: A trace's optional prefix identity: rows with the same ``prefix_group`` (> 0) share the first
#: ``prefix_tokens`` tokens of their prompts (as far as both have them); 0 is no shared prefix.
PREFIX_COLUMNS = ("prefix_group", "prefix_tokens")
#: Or: the row's prompt starts with the first ``prefix_tokens`` tokens of row ``prefix_parent``'s.
PARENT_COLUMN = "prefix_parent"
MAX_PREFIX_GROUP = MAX_SESSIONS


def has_prefix_identity(path: str) -> bool:
    """Whether the trace's header has a prefix identity's columns."""
    group, tokens, parent = has_columns(path, PREFIX_COLUMNS + (PARENT_COLUMN,))
    return tokens and (group or parent)


def _check_ints(path: Path, table, col: np.ndarray, name: str, top: int) -> None:
    bad = np.flatnonzero((col != np.rint(col)) | (col > top))
    if bad.size:
        raise ConfigError(str(path), table.where(int(bad[0]), name), f"not an integer from 0 to {top}")


def read_trace(path: Path, speedup: float = 1.0):
    """(arrival s from 0, prompt tokens, output tokens, prefix groups, prefix parents (0-based row,
    -1: none), prefix tokens); the last three None without a prefix identity."""
    cols = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
    group_col, tokens_col, parent_col = has_columns(str(path), PREFIX_COLUMNS + (PARENT_COLUMN,))
    if tokens_col != (group_col or parent_col):
        missing, there = ("prefix_tokens", "prefix_group" if group_col else PARENT_COLUMN) if not tokens_col \
            else ("prefix_group", "prefix_tokens")
        raise ConfigError(str(path), missing, f"no such column, but {there} is there: a prefix identity needs both "
                                              "prefix_group (or prefix_parent) and prefix_tokens")
    extra = tuple(c for c, there in zip(PREFIX_COLUMNS + (PARENT_COLUMN,), (group_col, tokens_col, parent_col))
                  if there)
    table = read_columns(str(path), cols + extra)
    arrived = table.values[0]
    back = np.flatnonzero(np.diff(arrived) < 0)
    if back.size:
        raise ConfigError(str(path), table.where(int(back[0]) + 1, "arrived_at"),
                          "earlier than the row before; arrival times must be non-decreasing")
    if (arrived[-1] - arrived[0]) / speedup > MAX_DURATION_S:
        raise ConfigError(str(path), table.where(arrived.size - 1, "arrived_at"), (
            f"the trace spans more than {MAX_DURATION_S:g} s (replayed at speedup {speedup:g}); "
            "the most a run may span"))
    for name, col in zip(cols[1:], table.values[1:3]):
        bad = np.flatnonzero((col < 1) | (col != np.rint(col)) | (col > MAX_TOKENS))
        if bad.size:
            raise ConfigError(str(path), table.where(int(bad[0]), name),
                              f"not a token count; allowed: integers from 1 to {MAX_TOKENS}")
    prompts, outputs = table.values[1].astype(np.int64), table.values[2].astype(np.int64)
    if not extra:
        return arrived - arrived[0], prompts, outputs, None, None, None
    named = dict(zip(extra, table.values[3:]))
    n = arrived.size
    groups, ptoks = named.get("prefix_group", np.zeros(n)), named["prefix_tokens"]
    parents = named.get(PARENT_COLUMN, np.zeros(n))
    _check_ints(path, table, groups, "prefix_group", MAX_PREFIX_GROUP)
    _check_ints(path, table, ptoks, "prefix_tokens", MAX_TOKENS)
    _check_ints(path, table, parents, PARENT_COLUMN, MAX_SESSIONS)
    rows = np.arange(1, n + 1)
    checks = (
        ((groups > 0) & (parents > 0), PARENT_COLUMN, "a row takes its prefix from a group or from a parent "
                                                      "row, not both: set prefix_group or prefix_parent to 0"),
        (parents >= rows, PARENT_COLUMN, "must name an earlier data row (1 is the first) or be 0"),
        (((groups > 0) | (parents > 0)) & (ptoks >= prompts), "prefix_tokens",
         "must be less than num_prefill_tokens (the prompt keeps at least one token of its own)"),
    )
    for bad_rows, name, message in checks:
        bad = np.flatnonzero(bad_rows)
        if bad.size:
            raise ConfigError(str(path), table.where(int(bad[0]), name), message)
    has = parents > 0
    if has.any():
        of = np.flatnonzero(has)
        over = of[ptoks[of] > prompts[parents[of].astype(np.int64) - 1]]
        if over.size:
            raise ConfigError(str(path), table.where(int(over[0]), "prefix_tokens"),
                              "must be at most the parent row's num_prefill_tokens")
    ptoks = np.where((groups > 0) | has, ptoks, 0).astype(np.int64)
    return (arrived - arrived[0], prompts, outputs, groups.astype(np.int64), parents.astype(np.int64) - 1, ptoks)


def parent_chains(groups: np.ndarray, parents: np.ndarray, ptoks: np.ndarray, prompts: np.ndarray,
                  first_segment: int) -> list[tuple]:
    """Each row's prefix as segments: a group's stream, or its parent's prompt cut at
    ``prefix_tokens``; row ``i``'s own tokens are segment ``first_segment + i``."""
    full: list[tuple] = []
    chains: list[tuple] = []
    for i, (g, p, k, n) in enumerate(zip(groups.tolist(), parents.tolist(), ptoks.tolist(), prompts.tolist())):
        if g > 0:
            chain = ((g, k),)
        elif p >= 0:
            chain, left = [], k
            for seg, length in full[p]:
                if left <= 0:
                    break
                chain.append((seg, min(length, left)))
                left -= length
            chain = tuple(chain)
        else:
            chain = ()
        chains.append(chain)
        full.append(chain + ((first_segment + i, n - k),))
    return chains

"""The served prompts' prefix identity, as a trace says it (``sim serve --out``'s arrivals.csv).

A served prompt is a chain of segments, each named by a hash of the prompt up to its end
(sim/serve/prompts.py): two prompts share exactly the segments of their common prefix. As
each request arrives (on any replica: one clock, so one order), :class:`PrefixIdentity` finds
the earlier prompt it shares the most with, its *parent*, and how many tokens: the trace's
``prefix_parent`` (that row, 1 = the first) and ``prefix_tokens`` columns
(sim/workload/trace.py). Replayed, a row's prompt is its parent's cut there and tokens of its
own after, so any two rows share what the served prompts shared (the tree argument: a
prompt shares with any earlier one at most what it shares with its parent, and exactly the
lesser of that and what the parent shares with it), and the prefix cache finds the same
blocks. ``prefix_tokens`` stays below the prompt's length (a trace's rule): an exact repeat
keeps its last token its own, which changes no hit (a cache hit always leaves the last
prompt token to compute).
"""

from __future__ import annotations


class PrefixIdentity:
    """Every arrival's trace row: (arrival s, prompt tokens, output tokens, parent row, tokens)."""

    def __init__(self) -> None:
        self._first: dict[int, tuple[int, int]] = {}  # segment id -> (the first row holding it, tokens to its end)
        self.rows: list[tuple[float, int, int, int, int]] = []

    def add(self, req) -> None:
        first, segments = self._first, req.prompt_segments
        parent = shared = 0
        for seg, _ in segments:
            hit = first.get(seg)
            if hit is None:
                break
            parent, shared = hit
        row = len(self.rows) + 1
        tokens = 0
        for seg, n in segments:
            tokens += n
            first.setdefault(seg, (row, tokens))
        num_prompt = req.num_prompt_tokens
        shared = min(shared, num_prompt - 1)
        self.rows.append((req.arrival_s, num_prompt, req.num_output_tokens, parent if shared > 0 else 0, shared))


def arrivals_csv(identity: PrefixIdentity) -> str:
    """The served requests as a trace, in arrival order, arrival times from the first's."""
    rows = identity.rows
    t0 = rows[0][0] if rows else 0.0
    return "arrived_at,num_prefill_tokens,num_decode_tokens,prefix_parent,prefix_tokens\n" + "".join(
        f"{a - t0!r},{p},{o},{parent},{k}\n" for a, p, o, parent, k in rows)

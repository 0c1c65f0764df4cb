"""The first segment's block hashes, memoised across requests (sim/kv/hashing.py ``_FIRST``), are
the hashes the segment walk gives: for any layout of segments, any block size, extended in one go
or step by step, with the memo warm, cold, shorter than the segment, or cleared at its bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv import hashing
from sim.kv.hashing import extend_block_hashes
from sim.request import Request


def walk(segments: tuple, num_blocks: int, B: int) -> list[int]:
    """The chained hashes by the definition: block i's pieces (segment, offset, length), chained."""
    pieces_of = [[] for _ in range(num_blocks)]
    pos = 0
    for seg_id, length in segments:
        for off in range(length):
            block = (pos + off) // B
            if block >= num_blocks:
                break
            pieces = pieces_of[block]
            if pieces and pieces[-1][0] == seg_id and pieces[-1][1] + pieces[-1][2] == off:
                pieces[-1] = (seg_id, pieces[-1][1], pieces[-1][2] + 1)
            else:
                pieces.append((seg_id, off, 1))
        pos += length
    out, prev = [], 0
    for pieces in pieces_of:
        prev = hash((prev, tuple(pieces)))
        out.append(prev)
    return out


segments_st = st.lists(st.tuples(st.integers(1, 6), st.integers(1, 90)), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(segments=segments_st, B=st.sampled_from([1, 4, 16]), cuts=st.lists(st.integers(0, 60), max_size=3),
       bound=st.sampled_from([1 << 16, 3, 40]))
def test_memoised_hashes_are_the_walk(segments, B, cuts, bound) -> None:
    segments = tuple(segments)
    total = sum(n for _, n in segments) // B
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hashing, "MEMO_BLOCKS", bound)
        mp.setattr(hashing, "_FIRST", {})  # cold
        mp.setattr(hashing, "_memo_blocks", [0])
        for rid in range(3):  # the memo cold, then warm (and maybe cleared at its bound meanwhile)
            req = Request(rid, 0.0, segments, 10, 5)
            for cut in sorted(min(c, total) for c in cuts) + [total]:
                got = list(extend_block_hashes(req, cut, B))
                assert got[:cut] == walk(segments, total, B)[:cut]
            assert hashing._memo_blocks[0] == sum(len(v) for v in hashing._FIRST.values())
            assert hashing._memo_blocks[0] <= max(bound, segments[0][1] // B)


def test_a_shared_prompt_is_hashed_once() -> None:
    """A second request beginning with the same segment takes its blocks' hashes from the memo."""
    first = Request(0, 0.0, ((9_999_001, 300), (9_999_002, 40)), 10, 5)
    extend_block_hashes(first, 21, 16)
    memo = hashing._FIRST[(9_999_001, 16)]
    assert memo == first.block_hashes[:18]
    second = Request(1, 0.0, ((9_999_001, 300), (9_999_003, 70)), 10, 5)
    extend_block_hashes(second, 5, 16)  # fewer blocks than the segment holds
    assert second.block_hashes == memo[:5]
    extend_block_hashes(second, 23, 16)
    assert second.block_hashes == walk(second.prompt_segments, 23, 16)
    assert hashing._FIRST[(9_999_001, 16)] is memo

"""Chained block hashes from symbolic segments, and the swap space's byte accounting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.hashing import extend_block_hashes
from sim.kv.swap import SwapSpace

B = 16


def hashes(make_request, segments, n_blocks, rid=0):
    return list(extend_block_hashes(make_request(rid, segments), n_blocks, B))


def test_equal_prefixes_equal_hashes(make_request) -> None:
    a = hashes(make_request, [(1, 32), (10, 20)], 3, rid=0)
    b = hashes(make_request, [(1, 32), (11, 20)], 3, rid=1)
    assert len(a) == len(b) == 3
    assert a[:2] == b[:2]
    assert a[2] != b[2]


def test_different_segment_ids_differ(make_request) -> None:
    a = hashes(make_request, [(1, 48)], 3)
    b = hashes(make_request, [(2, 48)], 3)
    assert all(x != y for x, y in zip(a, b))


def test_chaining_a_later_block_depends_on_earlier_ones(make_request) -> None:
    # Block 1 has the same pieces (segment 5 tokens 0..16) but follows a different block 0.
    a = hashes(make_request, [(1, 16), (5, 16)], 2)
    b = hashes(make_request, [(2, 16), (5, 16)], 2)
    assert a[1] != b[1]


def test_segment_boundaries_matter(make_request) -> None:
    # Same total length, same ids, different split: different content.
    a = hashes(make_request, [(1, 10), (2, 22)], 2)
    b = hashes(make_request, [(1, 12), (2, 20)], 2)
    assert a[0] != b[0] and a[1] != b[1]


def test_only_requested_blocks_are_hashed(make_request) -> None:
    req = make_request(0, [(1, 50)])
    assert len(extend_block_hashes(req, 2, B)) == 2
    assert len(extend_block_hashes(req, 1, B)) == 2  # asking for fewer keeps what exists
    assert len(extend_block_hashes(req, 3, B)) == 3


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    cut=st.integers(0, 10),
)
def test_incremental_extension_equals_one_shot(make_request, lengths, cut) -> None:
    segments = [(i + 1, n) for i, n in enumerate(lengths)]
    full = sum(lengths) // B
    cut = min(cut, full)
    step = make_request(0, segments)
    extend_block_hashes(step, cut, B)
    for n in range(cut, full + 1):
        extend_block_hashes(step, n, B)
    one_shot = make_request(1, segments)
    assert extend_block_hashes(one_shot, full, B) == step.block_hashes
    assert len(step.block_hashes) == full


def test_output_tokens_hash_into_later_blocks(make_request) -> None:
    req = make_request(0, [(1, 20)], output=50, max_tokens=50)
    extend_block_hashes(req, 1, B)  # only the prompt's full block is known
    assert len(req.block_hashes) == 1
    req.num_generated = 13  # 33 known tokens: block 1 is now full
    extend_block_hashes(req, req.num_tokens // B, B)
    assert len(req.block_hashes) == 2
    # The same tokens given as an explicit prompt (the next turn) hash the same.
    twin = make_request(5, [(1, 20), (req.output_segment, 13)])
    assert extend_block_hashes(twin, 2, B) == req.block_hashes
    # Another request's output differs, though lengths agree.
    other = make_request(6, [(1, 20), (-(99 + 1), 13)])
    assert extend_block_hashes(other, 2, B)[1] != req.block_hashes[1]


def test_swap_space_accounting() -> None:
    swap = SwapSpace(100)
    assert swap.reserve(1, 60)
    assert not swap.reserve(2, 50)  # 110 > 100: refused, nothing held
    assert swap.used_bytes == 60
    assert swap.reserve(3, 40)
    swap.check_invariants()
    assert swap.release(1) == 60
    assert swap.used_bytes == 40 and swap.peak_used_bytes == 100
    swap.check_invariants()
    with pytest.raises(ValueError, match="capacity_bytes"):
        SwapSpace(-1)


@settings(max_examples=200, deadline=None)
@given(prompt=st.lists(st.integers(1, 40), min_size=1, max_size=4), generated=st.integers(0, 120),
       steps=st.lists(st.integers(0, 40), max_size=12))
def test_output_blocks_hash_as_the_general_walk_does(make_request, prompt, generated, steps) -> None:
    """Blocks lying wholly in the output (a decode's, hashed a block at a time) take a short
    cut past the segment walk: the hashes equal one walk over every known token."""
    segments = [(7 + i, n) for i, n in enumerate(prompt)]
    once = make_request(5, segments, output=generated + 1)  # the same id: the same output segment
    step = make_request(5, segments, output=generated + 1)
    once.num_generated = step.num_generated = generated
    total = (sum(prompt) + generated) // B
    expected = list(extend_block_hashes(once, total, B))
    done = 0
    for k in steps:  # prompt blocks and output blocks in uneven pieces, as allocations ask for them
        done = min(total, done + k)
        extend_block_hashes(step, done, B)
    assert list(extend_block_hashes(step, total, B)) == expected

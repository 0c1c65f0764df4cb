"""``Request.slot_room`` is exact: within it, ``allocate_slots`` succeeds and changes nothing.

The continuous scheduler skips ``allocate_slots`` for a request whose next step stays
within ``slot_room`` (sim/sched/continuous.py). These tests drive a paged allocator
through random admissions (with prefix-cache hits), chunked growth, decodes, eviction of
cached blocks and frees, and at every state check, for every growth a scheduler could
ask, that the real call on a copy agrees with the shortcut: it returns True and leaves
the allocator and the request exactly as they were.
"""

from __future__ import annotations

import copy
import random

import pytest

from sim.kv.paged import PagedAllocator
from sim.kv.token_budget import TokenBudget, TokenEviction
from sim.request import Request

B = 4


def _state(alloc: PagedAllocator, req: Request) -> tuple:
    pool = alloc.pool
    return (dict(alloc.block_tables), dict(alloc._num_registered), list(pool.ref_cnt),
            list(getattr(pool, "block_hash", ())), dict(getattr(pool, "_cached", {})), pool.free_order(), pool.num_cached_free,
            pool.num_evictions, alloc.num_queried_tokens, alloc.num_hit_tokens,
            list(req.block_hashes), req.slot_room)


def _check_room(alloc: PagedAllocator, req: Request) -> int:
    """Every ``n`` the scheduler may ask within the room: the call is a no-op returning True."""
    checked = 0
    left = req.num_tokens - req.num_computed_tokens
    for n in range(1, left + 1):
        if req.num_computed_tokens + n > req.slot_room:
            break
        a, r = copy.deepcopy((alloc, req))
        before = _state(a, r)
        assert a.allocate_slots(r, n), (req, n)
        assert _state(a, r) == before, (req, n)
        checked += 1
    return checked


def _check_decode_slot(alloc: PagedAllocator, req: Request) -> int:
    """A decode past its room: ``decode_slot`` does what ``allocate_slots(req, 1)`` does."""
    if alloc._bounded or req.num_generated == 0 or req.num_computed_tokens != req.num_tokens - 1:
        return 0
    if req.num_computed_tokens + 1 <= req.slot_room or alloc.pool.num_free == 0:
        return 0
    a, r = copy.deepcopy((alloc, req))
    assert a.allocate_slots(r, 1)
    b, q = copy.deepcopy((alloc, req))
    b.decode_slot(q)
    assert _state(a, r) == _state(b, q), req
    return 1


def _run(seed: int, prefix_caching: bool, budget: TokenBudget = TokenBudget(),
         crossings: list[int] | None = None) -> int:
    """A random program of admissions, chunks, decodes and frees; checks every request's
    room after each action; counts decode crossings checked into ``crossings[0]``."""
    crossings = [0] if crossings is None else crossings
    rng = random.Random(seed)
    alloc = PagedAllocator(24, B, prefix_caching, budget=budget)
    live: list[Request] = []
    next_id = checked = 0
    for _ in range(150):
        action = rng.random()
        if action < 0.25 or not live:  # admit, sharing a prefix sometimes
            shared = ((1, rng.choice((3, 4, 8, 9))),) if rng.random() < 0.6 else ()
            req = Request(next_id, 0.0, shared + ((100 + next_id, rng.randint(1, 9)),), 20,
                          rng.randint(1, 12))
            next_id += 1
            cached = alloc.lookup_prefix(req)
            n = min(req.num_tokens - cached, rng.randint(1, 12))
            if alloc.allocate_slots(req, n, cached):
                req.num_computed_tokens = cached + n
                live.append(req)
        elif action < 0.9:  # grow: a prefill chunk or a decode
            req = rng.choice(live)
            left = req.num_tokens - req.num_computed_tokens
            n = min(left, rng.randint(1, 6))
            if alloc.allocate_slots(req, n):
                req.num_computed_tokens += n
        else:
            req = live.pop(rng.randrange(len(live)))
            alloc.free(req)
            assert req.slot_room == 0
        for req in list(live):
            if req.num_computed_tokens == req.num_tokens:  # caught up: sample a token
                req.num_generated += 1
            if req.num_generated >= req.num_output_tokens:
                live.remove(req)
                alloc.free(req)
        alloc.check_invariants()
        for req in live:
            checked += _check_room(alloc, req)
            crossings[0] += _check_decode_slot(alloc, req)
    return checked


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_slot_room_is_a_no_op_allocation(seed: int, prefix_caching: bool) -> None:
    assert _run(seed, prefix_caching) > 0  # the shortcut was exercised


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("prefix_caching", [False, True])
def test_a_decode_crossing_allocates_as_the_general_path_does(seed: int, prefix_caching: bool) -> None:
    crossings = [0]
    _run(seed, prefix_caching, crossings=crossings)
    assert crossings[0] > 0  # block and hash crossings were checked


def test_slot_room_unused_under_a_token_budget() -> None:
    budget = TokenBudget(TokenEviction.SLIDING_WINDOW, window_tokens=8)
    assert _run(0, False, budget) == 0  # room stays 0: every step asks the allocator

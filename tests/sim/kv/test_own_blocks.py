"""A request's own blocks, hashed when it is freed, give the same cache as hashing them as
they fill (sim/kv/paged.py, ``Request.own_from``), under LRU and LFU eviction.

Two allocators run the same random program of conversations in lockstep: turns with
and without a shared system prompt, follow-up turns that repeat the previous turn and its
answer, prefill chunks, decodes, recompute and swap-style frees with readmission, and
finishes. One allocator's requests say which tokens are their own, as the session driver
sets them; the other's claim nothing, so it hashes every block as it fills (the reference).
After every action, everything a scheduler, a router or a report can see must agree:
lookups, allocation results, block tables, reference counts, the free queue's order, cached
free blocks, evictions and the hit counters.
"""

from __future__ import annotations

import random

import pytest

from sim.kv.block_pool import ANON
from sim.kv.eviction import PrefixEviction
from sim.kv.paged import PagedAllocator
from sim.request import Request

B = 4


def _seen(alloc: PagedAllocator) -> tuple:
    pool = alloc.pool
    return (dict(alloc.block_tables), list(pool.ref_cnt), pool.free_order(), pool.num_cached_free,
            pool.num_evictions, alloc.num_queried_tokens, alloc.num_hit_tokens)


class Pair:
    """One logical request as each allocator's own Request object."""

    def __init__(self, rid: int, segments: tuple, out: int, own_from: int, followed: bool) -> None:
        self.own = Request(rid, 0.0, segments, 40, out)
        self.own.own_from, self.own.followed = own_from, followed
        self.ref = Request(rid, 0.0, segments, 40, out)  # own_from None: every block as it fills

    def both(self):
        return (self.own, self.ref)


def _program(seed: int, policy: PrefixEviction = PrefixEviction.LRU, num_blocks: int = 20,
             steps: int = 250) -> dict:
    rng = random.Random(seed)
    allocs = (PagedAllocator(num_blocks, B, True, eviction=policy), PagedAllocator(num_blocks, B, True, eviction=policy))
    waiting: list[tuple[Pair, int]] = []  # (request, turns left after it)
    running: list[tuple[Pair, int]] = []
    next_id, next_seg = 0, 100
    seen = {"anon": 0, "hits": 0, "preempted": 0, "finished": 0}

    def new_turn(prev: Pair | None, turns_left: int) -> None:
        nonlocal next_id, next_seg
        if prev is None:
            head = ((rng.choice((1, 2)), rng.choice((3, 4, 8))),) if rng.random() < 0.6 else ()
        else:
            head = prev.own.segments()
        user = rng.randint(1, 9)
        segments = head + ((next_seg, user),)
        next_seg += 1
        own_from = sum(n for _, n in segments) - user
        waiting.append((Pair(next_id, segments, rng.randint(1, 10), own_from, turns_left > 0), turns_left))
        next_id += 1

    for _ in range(steps):
        action = rng.random()
        if action < 0.2 or not (waiting or running):
            new_turn(None, rng.choice((0, 0, 1, 2)))
        elif action < 0.45 and waiting:  # admit the front, with its cache hits
            pair, left = waiting[0]
            swapped = pair.own.num_computed_tokens > 0  # its KV comes back: no lookup
            hits = [0 if swapped else a.lookup_prefix(r) for a, r in zip(allocs, pair.both())]
            assert hits[0] == hits[1], pair.own
            cached = hits[0]
            n = min(pair.own.num_tokens - pair.own.num_computed_tokens - cached, rng.randint(1, 12))
            ok = [a.allocate_slots(r, n, cached) for a, r in zip(allocs, pair.both())]
            assert ok[0] == ok[1]
            if ok[0]:
                seen["hits"] += cached > 0
                waiting.pop(0)
                for r in pair.both():
                    r.num_computed_tokens += cached + n
                running.append((pair, left))
        elif action < 0.9 and running:  # grow one: a chunk or a decode
            pair, _ = rng.choice(running)
            own = pair.own
            n = min(own.num_tokens - own.num_computed_tokens, rng.randint(1, 6))
            ok = [a.allocate_slots(r, n) for a, r in zip(allocs, pair.both())]
            assert ok[0] == ok[1]
            if ok[0]:
                for r in pair.both():
                    r.num_computed_tokens += n
        elif running:  # preempt one (recompute or swap: its blocks are freed either way)
            pair, left = running.pop(rng.randrange(len(running)))
            recompute = rng.random() < 0.6
            for a, r in zip(allocs, pair.both()):
                a.free(r)
                if recompute:
                    r.num_computed_tokens = 0
            seen["preempted"] += 1
            waiting.insert(0, (pair, left))
        for pair, left in list(running):
            own = pair.own
            if own.num_computed_tokens == own.num_tokens:  # caught up: sample a token
                for r in pair.both():
                    r.num_generated += 1
            if own.num_generated >= own.num_output_tokens:
                running.remove((pair, left))
                for a, r in zip(allocs, pair.both()):
                    a.free(r)
                seen["finished"] += 1
                if left:
                    new_turn(pair, left - 1)
        for a in allocs:
            a.check_invariants()
        assert _seen(allocs[0]) == _seen(allocs[1])
        seen["anon"] = max(seen["anon"], sum(1 for h in allocs[0].pool.block_hash if h == ANON))
    return seen


@pytest.mark.parametrize("policy", [PrefixEviction.LRU, PrefixEviction.LFU])
@pytest.mark.parametrize("seed", range(12))
def test_own_blocks_hashed_at_free_give_the_same_cache(seed: int, policy: PrefixEviction) -> None:
    seen = _program(seed, policy)
    assert seen["finished"] > 0 and seen["preempted"] > 0


@pytest.mark.parametrize("policy", [PrefixEviction.LRU, PrefixEviction.LFU])
def test_the_program_exercises_every_case(policy: PrefixEviction) -> None:
    """Across the seeds: cache hits, preemptions, and blocks marked cached for no one."""
    totals = [_program(seed, policy) for seed in range(12)]
    assert sum(t["hits"] for t in totals) > 0
    assert sum(t["anon"] for t in totals) > 0
    assert sum(t["preempted"] for t in totals) > 0


def test_fifo_hashes_every_block_as_it_fills() -> None:
    """Its queue orders cached blocks by when they were cached: nothing is deferred."""
    for policy in (PrefixEviction.FIFO,):
        alloc = PagedAllocator(16, B, True, eviction=policy)
        req = Request(0, 0.0, ((100, 12),), 40, 5)
        req.own_from, req.followed = 0, False
        assert alloc.allocate_slots(req, 12)
        assert len(req.block_hashes) == 3
        assert all(h is not None and h != ANON for h in alloc.pool.block_hash[:3])

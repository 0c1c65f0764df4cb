"""FIFO's and LFU's free queues keep exactly the order of the heaps of (key, block) tuples
they replaced (heap_queues.py): FIFO a heap of int keys, LFU one FIFO per hit count. Random
programs of frees (cached or not), pops, cache hits on free blocks, hits on blocks in use
and new hashes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heap_queues import HeapFIFO, HeapLFU
from sim.kv.eviction import FIFOQueue, LFUQueue


STEPS = st.one_of(
    st.tuples(st.just("pop"), st.integers(1, 12)),
    st.tuples(st.just("free"), st.integers(1, 12), st.booleans()),
    st.tuples(st.just("revive"), st.integers(0, 10_000)),
    st.tuples(st.just("hit"), st.integers(0, 10_000)),
    st.tuples(st.just("cache"), st.integers(0, 10_000)),
)


@settings(max_examples=300, deadline=None)
@given(program=st.lists(STEPS, max_size=250), n=st.sampled_from([5, 40]),
       kind=st.sampled_from([(FIFOQueue, HeapFIFO), (LFUQueue, HeapLFU)]))
def test_same_order_as_the_heap(program, n, kind) -> None:
    q, ref = kind[0](range(n)), kind[1](range(n))
    taken: list[int] = []  # in use, most recently taken last
    cached: set[int] = set()  # blocks with a hash (in use or free)
    revived = 0
    for step in program:
        op = step[0]
        if op == "pop":
            k = min(step[1], len(ref))
            got = q.pop_many(k)
            assert got == ref.pop_many(k)
            cached.difference_update(got)  # reused for new content: evicted
            taken += got
        elif op == "free" and taken:
            freed = taken[-step[1]:][::-1]
            del taken[-step[1]:]
            entries = [(b, b in cached) for b in freed]
            q.push_many(entries)
            ref.push_many(entries)
        elif op == "revive":  # a cache hit on a free cached block
            free_cached = [b for b in ref if b in cached]
            if free_cached:
                block = free_cached[step[1] % len(free_cached)]
                for queue in (q, ref):
                    queue.remove(block)
                    queue.on_hit(block)
                taken.append(block)
                revived += 1
        elif op == "hit" and taken:  # a hit on a block in use
            block = taken[step[1] % len(taken)]
            if block in cached:
                q.on_hit(block)
                ref.on_hit(block)
        elif op == "cache" and taken:  # a block in use gets its hash
            block = taken[step[1] % len(taken)]
            if block not in cached:
                cached.add(block)
                q.on_cached(block)
                ref.on_cached(block)
        assert len(q) == len(ref)
        assert list(q) == list(ref)
    assert all((b in q) == (b in ref) for b in range(n))


def test_a_revived_block_freed_again_is_not_popped_at_its_old_place() -> None:
    """Its old entry (hits 0) is stale: the block waits at its new hit count."""
    q = LFUQueue(range(3))
    assert q.pop_many(3) == [0, 1, 2]
    for block in (0, 1, 2):
        q.on_cached(block)
    q.push_many([(1, True), (0, True), (2, True)])  # hits 0, freed in that order
    q.remove(1)  # a hit on the free block 1: in use again, 1 hit
    q.on_hit(1)
    q.push(1, True)  # freed again: behind every block with no hit
    assert list(q) == [0, 2, 1]
    assert q.pop_many(3) == [0, 2, 1]


def test_fifo_pops_cached_blocks_in_the_order_they_were_cached() -> None:
    """However often hit, and whenever freed; a block revived and freed again keeps its place."""
    q = FIFOQueue(range(3))
    assert q.pop_many(3) == [0, 1, 2]
    for block in (2, 0, 1):  # cached in this order
        q.on_cached(block)
    q.push_many([(1, True), (0, True), (2, True)])
    q.remove(0)  # a hit: in use again
    q.on_hit(0)
    q.push(0, True)  # freed again: still second
    assert list(q) == [2, 0, 1]
    assert q.pop_many(3) == [2, 0, 1]

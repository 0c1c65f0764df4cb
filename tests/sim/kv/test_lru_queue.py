"""LRU's free queue (a list, its front, and stale entries left by cache hits) keeps exactly
the order of an ordered map with removal from the middle (vLLM's doubly linked list)."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.eviction import LRUQueue

# a program: ("pop", k) takes k blocks; ("free", k) frees the k most recently taken, tail
# first; ("hit", i) revives the free block at position i of the queue
STEPS = st.one_of(
    st.tuples(st.just("pop"), st.integers(1, 40)),
    st.tuples(st.just("free"), st.integers(1, 40)),
    st.tuples(st.just("hit"), st.integers(0, 10_000)),
)


@settings(max_examples=200, deadline=None)
@given(program=st.lists(STEPS, max_size=300), n=st.sampled_from([7, 64, 300]))
def test_same_order_as_an_ordered_map(program, n) -> None:
    q, ref = LRUQueue(range(n)), OrderedDict.fromkeys(range(n))
    q.compact_after = 50  # the list's popped front is dropped in these short programs too
    taken: list[int] = []
    hits = 0
    for op, k in program:
        if op == "pop":
            k = min(k, len(ref))
            got = q.pop_many(k)
            assert got == [ref.popitem(last=False)[0] for _ in range(k)]
            taken += got
        elif op == "free":
            freed = taken[-k:][::-1]
            del taken[-k:]
            q.push_many([(b, True) for b in freed])
            ref.update(dict.fromkeys(freed))
        elif ref:
            block = list(ref)[k % len(ref)]
            q.remove(block)
            del ref[block]
            taken.append(block)  # in use again: it may be freed later
            hits += 1
        assert len(q) == len(ref)
        assert list(q) == list(ref)
    assert all((b in q) == (b in ref) for b in range(n))


def test_a_revived_block_freed_again_keeps_its_new_place() -> None:
    q = LRUQueue(range(4))
    q.remove(1)  # a hit: block 1 leaves the queue
    q.push_plain([1])  # freed again: now at the back
    q.remove(1)
    q.push_plain([1])
    assert list(q) == [0, 2, 3, 1]
    assert q.pop_many(4) == [0, 2, 3, 1]
    assert len(q) == 0


def test_unhashed_first_push_hashed_puts_each_block_where_the_rule_says() -> None:
    """``push_hashed`` (the pool's release of one request's blocks): the blank blocks go to
    the front, the first given reused first, ahead of older blank blocks; the hashed ones to
    the back in the order given; whichever way the two are interleaved."""
    import itertools

    from sim.kv.eviction import UnhashedFirstLRUQueue

    for pattern in itertools.product((None, 7), repeat=5):
        q = UnhashedFirstLRUQueue(range(10))
        q.pop_many(10)
        q.push_hashed([8], [None])  # an older blank block at the front
        q.push_hashed([9], [7])  # an older hashed block at the back
        blocks = [3, 1, 4, 0, 5]
        q.push_hashed(blocks, list(pattern))
        blank = [b for b, h in zip(blocks, pattern) if h is None]
        hashed = [b for b, h in zip(blocks, pattern) if h is not None]
        assert list(q) == blank + [8, 9] + hashed, pattern
        assert q.pop_many(7) == blank + [8, 9] + hashed, pattern


def test_pool_fast_paths_pop_and_cache_as_the_general_ones() -> None:
    """vLLM 0.33's pool takes blocks off its queue's blank front without looking for hashes
    (``pop_blank``) and caches a request's full blocks in one call (``cache_many``): random
    releases, pops, hits and caching give the same blocks, hashes, evictions and free order
    as a pool driven through the one-block calls (``pop_free`` and ``cache``)."""
    import random

    from sim.kv.block_pool import ANON, BlockPool

    rng = random.Random(5)
    fast, slow = (BlockPool(64, unhashed_first=True, duplicates=True) for _ in range(2))
    slow._pop_blank = None  # every pop through the queue's pop_many and the hash check
    held: list[list[int]] = []
    for step in range(3000):
        op = rng.random()
        if op < 0.45 and fast.num_free:
            n = rng.randint(1, min(6, fast.num_free))
            got = fast.pop_free_many(n)
            assert got == [slow.pop_free() for _ in range(n)], step
            held.append(got)
        elif op < 0.7 and held:
            blocks = held[rng.randrange(len(held))]
            hashes = [rng.choice([ANON, rng.randint(0, 40)]) for _ in blocks]
            live = [(b, h) for b, h in zip(blocks, hashes) if h == ANON]
            fast.cache_anon([b for b, _ in live if fast.block_hash[b] is None])
            slow.cache_anon([b for b, _ in live if slow.block_hash[b] is None])
            real = [(b, h) for b, h in zip(blocks, hashes) if h != ANON]
            fast.cache_many([b for b, _ in real], [h for _, h in real])
            for b, h in real:
                slow.cache(b, h)
        elif held:
            blocks = held.pop(rng.randrange(len(held)))
            fast.release(blocks[::-1])
            slow.release(blocks[::-1])
        h = rng.randint(0, 40)
        if fast.get_cached(h) is not None and rng.random() < 0.3:  # a hit revives a block
            b = fast.get_cached(h)
            assert slow.get_cached(h) == b
            fast.touch(b)
            slow.touch(b)
            held.append([b])
        assert fast.block_hash == slow.block_hash and fast.ref_cnt == slow.ref_cnt, step
        assert fast.num_evictions == slow.num_evictions and fast.num_cached_free == slow.num_cached_free
        assert fast.free_order() == slow.free_order(), step
        fast.check_invariants()
    assert fast.num_evictions > 0 and fast._free._front == slow._free._front

"""The free queue of a pool without prefix caching (``PlainQueue``, a list and its front)
hands out and takes back blocks in exactly the order every policy's queue does when no
block is ever cached."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kv.block_pool import make_block_pool
from sim.kv.eviction import PlainQueue, PrefixEviction, make_free_queue

# a program: positive k pops k blocks, negative k frees the k most recently taken (tail first)
PROGRAMS = st.lists(st.integers(-40, 40).filter(bool), max_size=300)


@settings(max_examples=150, deadline=None)
@given(program=PROGRAMS, policy=st.sampled_from(list(PrefixEviction)))
def test_same_order_as_the_policy_queues(program, policy) -> None:
    n = 5000  # past PlainQueue's compaction threshold (4096 popped) in long programs
    plain, ref = make_free_queue(policy, n, caching=False), make_free_queue(policy, n, caching=True)
    assert isinstance(plain, PlainQueue) and not isinstance(ref, PlainQueue)
    taken: list[int] = []
    for k in program:
        if k > 0:
            k = min(k, len(ref))
            got = plain.pop_many(k)
            assert got == ref.pop_many(k)
            taken += got
        else:
            freed = taken[k:][::-1]
            del taken[k:]
            plain.push_many([(b, False) for b in freed])
            ref.push_many([(b, False) for b in freed])
        assert len(plain) == len(ref)
    assert list(plain) == list(ref)


def test_a_pool_without_caching_counts_and_refuses_hashes() -> None:
    pool = make_block_pool(6000, caching=False)
    a = pool.pop_free_many(4500)
    b = pool.pop_free_many(1000)
    pool.release(a[::-1])  # the front is dropped from the list past 4096 pops
    assert pool.num_free == 6000 - 1000
    assert pool.pop_free_many(3) == [5500, 5501, 5502]  # never-used blocks first, then a's tail
    assert pool.pop_free_many(498)[-1] == a[-1]
    pool.release(b[::-1])
    pool.check_invariants()
    with pytest.raises(AssertionError):
        pool.cache(b[0], 12345)
    with pytest.raises(KeyError):
        pool.pop_free_many(pool.num_free + 1)

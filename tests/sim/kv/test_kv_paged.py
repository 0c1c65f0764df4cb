"""BlockPool and PagedAllocator on a tiny world: 11 blocks of 16 tokens.

Every expected block id below follows from the contract in block_pool.py: the free queue
starts as 0..10, allocation pops its front, a freed block goes to the back, and a request
frees its blocks tail first.
"""

from __future__ import annotations

import pytest

from sim.kv.block_pool import BlockPool
from sim.kv.paged import PagedAllocator

B = 16
SYSTEM = (1, 2 * B)  # a 2-block shared system prompt


def paged(prefix_caching: bool = False) -> PagedAllocator:
    return PagedAllocator(11, B, prefix_caching)


def admit(alloc: PagedAllocator, req) -> int:
    """Admit ``req`` the way the scheduler does; return the cached tokens it got."""
    cached = alloc.lookup_prefix(req)
    assert alloc.allocate_slots(req, req.num_tokens - cached, cached)
    req.num_computed_tokens = cached
    alloc.check_invariants()
    return cached


def test_block_pool_rejects_empty_pool() -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(0)


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="block_size"):
        PagedAllocator(11, 0)


def test_allocation_hands_out_front_of_free_queue(make_request) -> None:
    alloc = paged()
    a, b = make_request(0, 40), make_request(1, 100)
    assert alloc.allocate_slots(a, 40)  # ceil(40/16) = 3 blocks
    alloc.check_invariants()
    assert alloc.block_tables[0] == [0, 1, 2]
    assert alloc.allocate_slots(b, 100)  # 7 blocks
    alloc.check_invariants()
    assert alloc.block_tables[1] == [3, 4, 5, 6, 7, 8, 9]
    assert alloc.pool.free_order() == [10]
    assert alloc.held_slots(a) == 48 and alloc.held_slots(b) == 112
    assert alloc.num_allocated_slots() == 10 * B
    assert alloc.num_external_fragmentation_slots() == 0


def test_short_pool_returns_false_and_changes_nothing(make_request) -> None:
    alloc = paged(prefix_caching=True)
    a, c = make_request(0, 160), make_request(2, 33)
    admit(alloc, a)  # 10 blocks
    before = (alloc.pool.free_order(), list(alloc.pool.ref_cnt), dict(alloc.block_tables),
              alloc.num_queried_tokens, alloc.num_hit_tokens)
    assert not alloc.allocate_slots(c, 33)  # needs 3 blocks, 1 is free
    alloc.check_invariants()
    after = (alloc.pool.free_order(), list(alloc.pool.ref_cnt), dict(alloc.block_tables),
             alloc.num_queried_tokens, alloc.num_hit_tokens)
    assert after == before
    assert 2 not in alloc.block_tables and alloc.held_slots(c) == 0


def test_growth_adds_a_block_only_at_a_boundary(make_request) -> None:
    alloc = paged()
    a = make_request(0, 16, output=5)
    assert alloc.allocate_slots(a, 16)
    a.num_computed_tokens, a.num_generated = 16, 1  # 17 known tokens, the 17th not computed
    assert alloc.allocate_slots(a, 1)
    assert alloc.block_tables[0] == [0, 1]
    a.num_computed_tokens, a.num_generated = 17, 2
    assert alloc.allocate_slots(a, 1)  # token 18 still fits block 1
    assert alloc.block_tables[0] == [0, 1]
    alloc.check_invariants()


def test_free_is_tail_first_and_reuse_is_lru(make_request) -> None:
    alloc = paged()
    a, b = make_request(0, 40), make_request(1, 100)
    alloc.allocate_slots(a, 40)
    alloc.allocate_slots(b, 100)
    alloc.free(a)
    alloc.check_invariants()
    assert alloc.pool.free_order() == [10, 2, 1, 0]  # a's tail block 2 is evicted before 0
    alloc.free(a)  # a no-op the second time
    assert alloc.pool.free_order() == [10, 2, 1, 0]
    c = make_request(2, 30)
    assert alloc.allocate_slots(c, 30)
    assert alloc.block_tables[2] == [10, 2]
    alloc.free(b)
    assert alloc.pool.free_order() == [1, 0, 9, 8, 7, 6, 5, 4, 3]
    alloc.check_invariants()


def test_free_all_returns_pool_to_empty(make_request) -> None:
    alloc = paged()
    reqs = [make_request(i, 16 * (i + 1)) for i in range(4)]  # 1 + 2 + 3 + 4 = 10 blocks
    for r in reqs:
        assert alloc.allocate_slots(r, r.num_tokens)
    for r in reqs:
        alloc.free(r)
        alloc.check_invariants()
    assert alloc.num_allocated_slots() == 0 and alloc.pool.num_free == 11


def test_shared_system_prompt_shares_physical_blocks(make_request) -> None:
    alloc = paged(prefix_caching=True)
    a = make_request(0, [SYSTEM, (10, 20)])  # 52 tokens: 4 blocks, 3 full
    b = make_request(1, [SYSTEM, (11, 20)])
    assert admit(alloc, a) == 0
    assert alloc.block_tables[0] == [0, 1, 2, 3]
    assert admit(alloc, b) == 2 * B  # block 2 differs: user text starts there
    assert alloc.block_tables[1] == [0, 1, 4, 5]
    assert alloc.pool.ref_cnt[0] == alloc.pool.ref_cnt[1] == 2
    assert alloc.pool.ref_cnt[2] == alloc.pool.ref_cnt[4] == 1
    # each physical slot counted once: 6 blocks in use, not 8
    assert alloc.num_allocated_slots() == 6 * B
    assert alloc.held_slots(b) == 4 * B
    assert alloc.num_queried_tokens == 104 and alloc.num_hit_tokens == 32


def test_lookup_claims_nothing(make_request) -> None:
    alloc = paged(prefix_caching=True)
    admit(alloc, make_request(0, [SYSTEM, (10, 20)]))
    b = make_request(1, [SYSTEM, (11, 20)])
    ref_before, free_before = list(alloc.pool.ref_cnt), alloc.pool.free_order()
    assert alloc.lookup_prefix(b) == 32
    assert alloc.pool.ref_cnt == ref_before and alloc.pool.free_order() == free_before


def test_lookup_never_returns_the_whole_prompt(make_request) -> None:
    alloc = paged(prefix_caching=True)
    admit(alloc, make_request(0, [SYSTEM, (10, 20)]))
    exactly_system = make_request(1, [SYSTEM])  # 32 tokens, both blocks cached
    assert alloc.lookup_prefix(exactly_system) == B  # one block left so a token is computed
    one_more = make_request(2, [SYSTEM, (12, 1)])  # 33 tokens
    assert alloc.lookup_prefix(one_more) == 2 * B


def test_lookup_is_zero_without_prefix_caching(make_request) -> None:
    alloc = paged(prefix_caching=False)
    alloc.allocate_slots(make_request(0, [SYSTEM, (10, 20)]), 52)
    assert alloc.lookup_prefix(make_request(1, [SYSTEM, (11, 20)])) == 0
    assert alloc.num_cached_free_slots() == 0


def test_only_whole_blocks_are_cached(make_request) -> None:
    alloc = paged(prefix_caching=True)
    admit(alloc, make_request(0, [(1, 20)]))  # one full block, one partial
    same_start = make_request(1, [(1, 20), (7, 30)])
    assert alloc.lookup_prefix(same_start) == B  # the partial block is never a hit


def test_different_prefix_no_hit(make_request) -> None:
    alloc = paged(prefix_caching=True)
    admit(alloc, make_request(0, [SYSTEM, (10, 20)]))
    other = make_request(1, [(2, 32), (11, 20)])  # another system prompt, same length
    assert alloc.lookup_prefix(other) == 0


def test_freed_cached_blocks_are_revived_then_evicted_front_first(make_request) -> None:
    alloc = paged(prefix_caching=True)
    a = make_request(0, [SYSTEM, (10, 20)])
    b = make_request(1, [SYSTEM, (11, 20)])
    admit(alloc, a)  # [0, 1, 2, 3], blocks 0-2 hashed
    admit(alloc, b)  # [0, 1, 4, 5], block 4 hashed
    hash_a2 = a.block_hashes[2]
    alloc.free(a)
    alloc.free(b)
    alloc.check_invariants()
    assert alloc.pool.free_order() == [6, 7, 8, 9, 10, 3, 2, 5, 4, 1, 0]
    assert alloc.pool.num_cached_free == 4  # blocks 2, 4, 1, 0 (3 and 5 were partial)
    assert alloc.num_cached_free_slots() == 4 * B
    assert alloc.num_allocated_slots() == 0

    c = make_request(2, [SYSTEM, (12, 20)])
    assert admit(alloc, c) == 2 * B  # revives blocks 0 and 1 from the free queue
    assert alloc.block_tables[2] == [0, 1, 6, 7]
    assert alloc.pool.free_order() == [8, 9, 10, 3, 2, 5, 4]
    assert alloc.pool.num_evictions == 0

    # Fill the pool: uncached blocks 8, 9, 10, 3 go first, then cached 2, 5, 4 in that order.
    big = make_request(3, 5 * B)
    assert alloc.allocate_slots(big, 5 * B)
    assert alloc.block_tables[3] == [8, 9, 10, 3, 2]
    assert alloc.pool.num_evictions == 1
    assert alloc.pool.get_cached(hash_a2) is None  # a's tail block was the one evicted
    assert alloc.pool.get_cached(b.block_hashes[2]) == 4  # b's still cached
    alloc.check_invariants()


def test_revived_blocks_count_against_the_free_pool(make_request) -> None:
    alloc = paged(prefix_caching=True)
    a = make_request(0, [SYSTEM, (10, 20)])
    admit(alloc, a)
    alloc.free(a)  # 11 free, 3 of them cached (0, 1, 2)
    filler = make_request(1, 8 * B)
    # the free queue is [4..10, 3, 2, 1, 0]: filler takes 4..10 and 3, evicting nothing
    assert alloc.allocate_slots(filler, 8 * B)
    assert alloc.pool.num_evictions == 0
    assert alloc.pool.free_order() == [2, 1, 0]
    # c would hit blocks 0 and 1 and need 3 more: only block 2 is left, so it must fail.
    c = make_request(2, [SYSTEM, (12, 40)])  # 72 tokens = 5 blocks
    cached = alloc.lookup_prefix(c)
    assert cached == 2 * B
    assert not alloc.allocate_slots(c, c.num_tokens - cached, cached)
    assert alloc.pool.free_order() == [2, 1, 0] and alloc.pool.num_cached_free == 3
    alloc.check_invariants()


def test_hit_rate_counters(make_request) -> None:
    alloc = paged(prefix_caching=True)
    reqs = [make_request(i, [SYSTEM, (10 + i, 20)]) for i in range(3)]
    hits = [admit(alloc, r) for r in reqs]
    assert hits == [0, 32, 32]
    assert alloc.num_queried_tokens == 3 * 52
    assert alloc.num_hit_tokens == 64


def test_output_tokens_are_cached_for_later_turns(make_request) -> None:
    """A finished turn's prompt + answer blocks are hits for a prompt that extends them."""
    alloc = paged(prefix_caching=True)
    t0 = make_request(0, [(1, 20)], output=20)
    admit(alloc, t0)  # 20 tokens: 1 full block
    # decode until 19 tokens generated: the last step computes token 39 (index 38)
    t0.num_computed_tokens, t0.num_generated = 20, 1
    while t0.num_generated < 20:
        assert alloc.allocate_slots(t0, 1)
        t0.num_computed_tokens += 1
        t0.num_generated += 1
        alloc.check_invariants()
    # 39 tokens computed (the 20th output token is sampled, never computed): 2 full blocks
    alloc.free(t0)
    t1 = make_request(1, [(1, 20), (t0.output_segment, 20), (2, 30)])
    assert alloc.lookup_prefix(t1) == 2 * B

"""The block pool's one-pass paths (sim/kv/block_pool.py) against its step-by-step ones.

``pop_free_many`` evicts and sets reference counts in one pass (where no subclass extends
``_evict``), ``touch_many`` touches a request's cache hits in one call (where neither the pool
extends ``touch`` nor the queue orders by hits), and ``release(..., anon=(a, b))`` marks
blocks ``ANON`` as it frees them (``cache_anon`` first, otherwise); under vLLM 0.33's queue a pop
counts its evictions without reading a hash while no findable block is free (``_findable``, which
``check_invariants`` recounts). A reference pool whose
subclass extends ``_evict`` and ``touch`` (with nothing added) takes the step-by-step paths; both
run the same random program under every eviction policy, and after every action the whole
state must agree: reference counts, hashes, the hash map and its duplicates, the free queue's
order, cached free blocks and evictions.
"""

from __future__ import annotations

import random

import pytest

from sim.kv.block_pool import ANON, BlockPool
from sim.kv.eviction import PrefixEviction


class StepByStep(BlockPool):
    """The same pool through the paths a subclass that extends ``_evict`` and ``touch`` gets."""

    def _evict(self, blocks, hashes, evicted) -> None:
        super()._evict(blocks, hashes, evicted)

    def touch(self, block: int) -> None:
        super().touch(block)

    def release(self, blocks, sole=0, anon=(0, 0)) -> None:
        a, b = anon
        if a < b:
            self.cache_anon(blocks[a:b])
        super().release(blocks, sole)


def _state(pool: BlockPool) -> tuple:
    pool.check_invariants()
    return (list(pool.ref_cnt), list(pool.block_hash), dict(pool._cached),
            {h: list(later) for h, later in pool._more.items()}, pool.free_order(),
            pool.num_cached_free, pool.num_evictions)


CONFIGS = [(policy, unhashed_first, dup) for policy in PrefixEviction for unhashed_first in (False, True)
           for dup in (False, True) if not unhashed_first or policy == PrefixEviction.LRU]


@pytest.mark.parametrize("policy,unhashed_first,duplicates", CONFIGS)
@pytest.mark.parametrize("seed", range(6))
def test_one_pass_paths_equal_step_by_step(policy, unhashed_first, duplicates, seed) -> None:
    rng = random.Random(seed)
    fast = BlockPool(64, policy, unhashed_first, duplicates)
    ref = StepByStep(64, policy, unhashed_first, duplicates)
    assert fast._plain_evict and not ref._plain_evict and not ref._plain_touch
    assert fast._plain_touch == (policy == PrefixEviction.LRU)
    held: list[list[int]] = []  # each "request"'s blocks, oldest first
    next_hash = [1]
    used = {"pop": 0, "hit": 0, "anon": 0, "evict": 0}
    if unhashed_first:
        used.update({"findable": 0, "anon only": 0})
    for _ in range(400):
        action = rng.random()
        if action < 0.45 and fast.num_free:  # a request takes fresh blocks, maybe hitting cached ones first
            hits = []
            if fast._cached and rng.random() < 0.6:
                hits = rng.sample(sorted(fast._cached), min(len(fast._cached), rng.randint(1, 4)))
                hits = [fast.get_cached(h) for h in hits]
                assert hits == [ref.get_cached(h) for h in [fast.block_hash[b] for b in hits]]
            count = min(rng.randint(1, 9), fast.num_free - sum(1 for b in hits if fast.ref_cnt[b] == 0))
            if hits:
                fast.touch_many(hits)
                ref.touch_many(hits)
                used["hit"] += 1
            new = []
            if count > 0:
                before = fast.num_evictions
                if unhashed_first:  # vLLM 0.33's queue: a pop reads hashes only while findable ones are free
                    used["findable" if fast._free._findable else "anon only"] += 1
                new = fast.pop_free_many(count)
                assert new == ref.pop_free_many(count)
                used["pop"] += 1
                used["evict"] += fast.num_evictions > before
            blocks = hits + new
            # some of its new blocks get hashes (some repeating a hash already cached: duplicates)
            for b in new:
                if rng.random() < 0.5:
                    h = rng.choice(sorted(fast._cached)) if fast._cached and rng.random() < 0.3 else next_hash[0]
                    next_hash[0] += 1
                    fast.cache(b, h)
                    ref.cache(b, h)
            if blocks:
                held.append(blocks)
        elif held:  # a request is freed tail first: its own (fresh) blocks first, some marked ANON
            blocks = held.pop(rng.randrange(len(held)))
            tail_first = blocks[::-1]
            own = [b for b in tail_first if fast.ref_cnt[b] == 1]
            sole = 0
            while sole < len(tail_first) and tail_first[sole] in own:
                sole += 1
            unhashed = [i for i in range(sole) if fast.block_hash[tail_first[i]] is None]
            anon = (0, 0)
            if unhashed and rng.random() < 0.7:  # a run of unhashed own blocks, as free passes them
                i = rng.choice(unhashed)
                j = i
                while j < sole and fast.block_hash[tail_first[j]] is None:
                    j += 1
                anon = (i, j)
                used["anon"] += 1
            fast.release(tail_first, sole, anon)
            ref.release(tail_first, sole, anon)
        assert _state(fast) == _state(ref)
    assert all(used.values()), used  # every path was taken
    assert ("anon only" in used and "findable" in used) == unhashed_first


def test_anon_blocks_count_as_cached_free_and_evict_on_reuse() -> None:
    """The one-pass release marks its anon blocks cached (ANON) in the free queue: reusing them counts
    evictions, and no lookup finds them."""
    pool = BlockPool(8)
    blocks = pool.pop_free_many(4)
    pool.release(blocks[::-1], 4, (1, 4))  # the tail block stays blank
    assert [pool.block_hash[b] for b in blocks] == [ANON, ANON, ANON, None]
    assert pool.num_cached_free == 3
    again = pool.pop_free_many(8)
    assert pool.num_evictions == 3 and pool.num_cached_free == 0
    assert all(pool.block_hash[b] is None for b in again)

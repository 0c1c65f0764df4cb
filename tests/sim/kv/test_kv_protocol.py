"""Both allocators implement every member of ``KVAllocator``, and its shared members behave.

Members are read off the Protocol itself (its annotated attributes and its methods), so a
member added there without an implementation fails here.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import pytest

from sim.kv import AllocatorKind, make_allocator
from sim.kv.base import KVAllocator, PrefixCacheStats
from sim.kv.contiguous import ContiguousAllocator
from sim.kv.paged import PagedAllocator
from sim.kv.token_budget import TokenBudget

B = 16
SYSTEM = (1, 2 * B)  # a 2-block shared system prompt

ATTRIBUTES = sorted(KVAllocator.__annotations__)
METHODS = sorted(n for n, v in vars(KVAllocator).items() if inspect.isfunction(v) and not n.startswith("_"))
KINDS = [ContiguousAllocator, PagedAllocator]


def instances() -> list:
    return [make_allocator(kind, num_blocks=11, block_size=B, max_kv_tokens=160) for kind in AllocatorKind]


def _shape(fn) -> list[tuple[str, object, object]]:
    """Parameter names, kinds and defaults (annotations aside)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_lists_what_callers_use() -> None:
    assert {"budget", "block_based", "block_tables", "num_total_slots", "block_size"} <= set(ATTRIBUTES)
    assert {"block_ids", "prefix_cache_stats", "lookup_prefix", "allocate_slots", "free"} <= set(METHODS)


@pytest.mark.parametrize("cls", KINDS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", METHODS)
def test_every_method_is_implemented_with_the_protocol_signature(cls, name) -> None:
    impl = inspect.getattr_static(cls, name, None)
    assert inspect.isfunction(impl), f"{cls.__name__} lacks {name}()"
    assert _shape(impl) == _shape(vars(KVAllocator)[name])


@pytest.mark.parametrize("name", ATTRIBUTES)
def test_every_attribute_is_present_on_every_kind(name) -> None:
    for alloc in instances():
        assert hasattr(alloc, name), f"{type(alloc).__name__} lacks {name}"
        assert not callable(getattr(alloc, name)), f"{type(alloc).__name__}.{name} is a method"


def test_attribute_values_by_kind() -> None:
    static, exact, paged = instances()
    for alloc in (static, exact):
        assert alloc.block_based is False and alloc.block_size == 1
    assert paged.block_based is True and paged.block_size == B
    for alloc in (static, exact, paged):
        assert alloc.num_total_slots == 11 * B
        assert isinstance(alloc.budget, TokenBudget) and alloc.budget.max_tokens is None
        assert isinstance(alloc.block_tables, Mapping) and len(alloc.block_tables) == 0


# -- block ids -----------------------------------------------------------------------------


def test_contiguous_allocators_hold_no_blocks(make_request) -> None:
    for alloc in instances()[:2]:
        r = make_request(0, 40, max_tokens=20)
        assert alloc.allocate_slots(r, 40)
        assert alloc.held_slots(r) > 0
        assert alloc.block_ids(r) == [] and len(alloc.block_tables) == 0
        alloc.free(r)
        assert alloc.block_ids(r) == []


def test_contiguous_block_tables_cannot_be_written() -> None:
    alloc = instances()[0]
    with pytest.raises(TypeError):
        alloc.block_tables[0] = [1]  # type: ignore[index]


def test_paged_block_ids_are_a_copy_of_the_live_table(make_request) -> None:
    alloc = PagedAllocator(11, B)
    a, b = make_request(0, 40), make_request(1, 20)
    assert alloc.block_ids(a) == []
    assert alloc.allocate_slots(a, 40) and alloc.allocate_slots(b, 20)
    assert alloc.block_ids(a) == [0, 1, 2] and alloc.block_ids(b) == [3, 4]
    assert dict(alloc.block_tables) == {0: [0, 1, 2], 1: [3, 4]}
    ids = alloc.block_ids(a)
    ids.append(99)  # a copy: the table is untouched
    assert alloc.block_tables[0] == [0, 1, 2]
    a.num_computed_tokens = 40
    assert alloc.allocate_slots(a, 10)  # 50 tokens: a fourth block
    assert alloc.block_ids(a) == [0, 1, 2, 5] == alloc.block_tables[0]
    alloc.free(a)
    assert alloc.block_ids(a) == [] and 0 not in alloc.block_tables


# -- prefix-cache counters -----------------------------------------------------------------


def admit(alloc, req) -> int:
    cached = alloc.lookup_prefix(req)
    assert alloc.allocate_slots(req, req.num_tokens - cached, cached)
    req.num_computed_tokens = cached
    return cached


def test_hit_rate_is_none_without_caching_or_lookups() -> None:
    assert PrefixCacheStats(False, 100, 0, 0).hit_rate is None
    assert PrefixCacheStats(True, 0, 0, 0).hit_rate is None
    assert PrefixCacheStats(True, 200, 50, 3).hit_rate == 0.25


def test_contiguous_stats_are_zero(make_request) -> None:
    for alloc in instances()[:2]:
        admit(alloc, make_request(0, 40, max_tokens=20))
        assert alloc.prefix_cache_stats() == PrefixCacheStats(False, 0, 0, 0)


def test_paged_stats_count_queries_hits_and_evictions(make_request) -> None:
    alloc = PagedAllocator(11, B, prefix_caching=True)
    reqs = [make_request(i, [SYSTEM, (10 + i, 20)]) for i in range(3)]  # 52 tokens each
    assert [admit(alloc, r) for r in reqs] == [0, 32, 32]
    stats = alloc.prefix_cache_stats()
    assert stats == PrefixCacheStats(True, queried_tokens=3 * 52, hit_tokens=64, evictions=0)
    assert stats.hit_rate == 64 / (3 * 52)
    for r in reqs:
        alloc.free(r)
    big = make_request(3, 11 * B)  # takes every block: the cached ones are evicted
    assert alloc.allocate_slots(big, 11 * B)
    assert alloc.prefix_cache_stats().evictions == alloc.pool.num_evictions > 0


def test_paged_stats_without_caching_count_queries_only(make_request) -> None:
    alloc = PagedAllocator(11, B)
    for i in range(2):
        admit(alloc, make_request(i, [SYSTEM, (10 + i, 20)]))
    stats = alloc.prefix_cache_stats()
    assert stats == PrefixCacheStats(False, queried_tokens=104, hit_tokens=0, evictions=0)
    assert stats.hit_rate is None

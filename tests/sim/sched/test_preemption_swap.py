"""A swap preemption moves block ids for block-based allocators, one extent for contiguous ones."""

from __future__ import annotations

from collections import deque

import pytest

from sim.config.scenario import PreemptionMode
from sim.kv.contiguous import ContiguousAllocator
from sim.kv.paged import PagedAllocator
from sim.kv.swap import SwapSpace, SwapTransfer
from sim.request import RequestStatus
from sim.sched.output import SchedulerOutput
from sim.sched.preemption import Preemptor

COPIES = 4  # per block, per layer, K and V


def swap_one(alloc, make_request, transfer=SwapTransfer.PER_BLOCK):
    pre = Preemptor(PreemptionMode.SWAP, alloc, SwapSpace(10**9), 2.0, copies_per_block=COPIES,
                    transfer=transfer)
    r = make_request(0, 40, max_tokens=8)
    assert alloc.allocate_slots(r, 40)
    r.num_computed_tokens = 40
    held = alloc.held_slots(r)
    out, swapped = SchedulerOutput(), deque()
    pre.preempt(r, deque(), swapped, out)
    assert r.status is RequestStatus.SWAPPED and list(swapped) == [r]
    assert out.swap_out_bytes == held * 2 and alloc.held_slots(r) == 0
    return out


def test_paged_swap_records_the_block_ids_and_copies_each_block(make_request) -> None:
    out = swap_one(PagedAllocator(11, 16), make_request)
    assert out.swapped_out_blocks == {0: [0, 1, 2]}
    assert out.swap_copies == 3 * COPIES and out.swap_staging_launches == 0


def test_contiguous_swap_moves_one_extent_without_block_ids(make_request) -> None:
    out = swap_one(ContiguousAllocator(176, 80, exact=True), make_request)
    assert out.swapped_out_blocks == {}
    assert out.swap_copies == COPIES


@pytest.mark.parametrize("alloc,staged", [(PagedAllocator(11, 16), True),
                                          (ContiguousAllocator(176, 80, exact=True), False)],
                         ids=["paged", "contiguous"])
def test_gathered_swaps_stage_only_blocks(make_request, alloc, staged) -> None:
    out = swap_one(alloc, make_request, SwapTransfer.GATHERED)
    assert out.swap_copies == COPIES
    assert out.swap_staging_launches == (COPIES if staged else 0)
    assert out.swap_staged_bytes == (out.swap_out_bytes if staged else 0)

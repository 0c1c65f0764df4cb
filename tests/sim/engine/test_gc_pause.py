"""sim/gc_pause.py: fewer collections inside a run, the collector as it was after it."""

from __future__ import annotations

import gc

from sim.gc_pause import YOUNG_THRESHOLD, fewer_collections


def test_inside_the_young_threshold_is_raised_and_the_live_objects_frozen_then_all_is_restored() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with fewer_collections():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0  # the objects alive at the start
        with fewer_collections():  # re-entrant: an inner run leaves the outer's settings alone
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_settings_are_restored_when_the_run_raises() -> None:
    before = gc.get_threshold()
    try:
        with fewer_collections():
            raise RuntimeError("a run that fails")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_cycles_made_inside_are_still_collected() -> None:
    with fewer_collections():
        a: list = []
        a.append(a)
        del a
        assert gc.collect() >= 1

"""The crossing schedules of macro-steps (sim/engine/macro/cross.py): the ring that keeps a
slot in its residue's bucket without prefix caching gives, step by step, the slots (in
order) and the next crossing step that a plain step -> slots map gives when every
crossing re-adds its slot one block later."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.engine.macro.cross import Buckets, Ring


class _Reference:
    """Every slot crosses at its first step, then every ``B`` steps: a dict, re-added."""

    def __init__(self, B: int) -> None:
        self.B, self.at, self.step_of = B, {}, {}

    def add(self, s: int, step: int) -> None:
        self.at.setdefault(step, []).append(s)
        self.step_of[s] = step

    def due(self, k: int) -> list[int]:
        slots = sorted(self.at.pop(k, []))
        for s in slots:
            self.add(s, k + self.B)
        return slots

    def remove(self, s: int) -> None:
        step = self.step_of.pop(s)
        self.at[step].remove(s)
        if not self.at[step]:
            del self.at[step]

    @property
    def next(self) -> float:
        return min(self.at) if self.at else math.inf


# per step: slots joining (each: its first crossing this many steps after the next step,
# modulo 2B + 2 so the edges near one block ahead come up often) and slots that finish
# (picked by index among the live ones)
STEPS = st.lists(st.tuples(st.lists(st.integers(0, 1000), max_size=3),
                           st.lists(st.integers(0, 1000), max_size=2)), max_size=120)


@settings(max_examples=200, deadline=None)
@given(B=st.sampled_from([1, 2, 4, 16]), initial=st.lists(st.integers(0, 40), max_size=20), steps=STEPS)
def test_the_ring_crosses_as_a_map_re_adding_each_slot_a_block_later(B, initial, steps) -> None:
    ring, ref = Ring(B), _Reference(B)
    live: list[int] = []
    for s, first in enumerate(initial):  # a stretch's running requests, first crossing >= 0
        ring.add(s, first, 0)
        ref.add(s, first)
        live.append(s)
    nxt_slot = len(initial)
    crossed = 0
    for k, (joins, finishes) in enumerate(steps):
        assert ring.next == ref.next
        if k == ring.next:
            got = list(ring.due(k))
            assert got == ref.due(k)
            crossed += len(got)
        else:
            assert ref.due(k) == []
        for pick in finishes:  # finished in step k
            if live:
                s = live.pop(pick % len(live))
                ring.remove(s, k)
                ref.remove(s)
        for raw in joins:  # joined in step k: first crossing from step k + 1 on
            ahead = raw % (2 * B + 2)
            ring.add(nxt_slot, k + 1 + ahead, k + 1)
            ref.add(nxt_slot, k + 1 + ahead)
            live.append(nxt_slot)
            nxt_slot += 1
    if len(steps) > 60 and initial:
        assert crossed > 0


def test_buckets_give_each_step_its_slots_in_order() -> None:
    b = Buckets()
    for s, step in [(3, 5), (1, 5), (2, 7), (0, 9)]:
        b.add(s, step, 0)
    assert b.next == 5
    assert b.due(5) == [1, 3] and b.next == 7
    b.remove(2, 5)
    assert b.next == 9
    b.add(4, 6, 6)
    assert b.next == 6 and b.due(6) == [4] and b.next == 9

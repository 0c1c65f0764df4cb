"""When each decode of a macro-step stretch next calls ``allocate_slots`` (sim/engine/macro/batch.py).

A decode calls the allocator at a step whose new token does not fit its ``slot_room``: a
*crossing*. Two schedules of crossings, by slot (slots sort in scheduling order):

* :class:`Ring`, when every decode's crossing only takes a block (no prefix caching, or
  decodes that hash nothing more until freed: sim/kv/paged.py's own blocks): a room is the
  table's slots, so after its first crossing a decode crosses every ``block_size`` steps, at
  the same step modulo the block size. A slot stays in the bucket of its residue for its whole life in the batch, and a
  crossing step only reads that bucket (kept sorted: slots join in increasing order). A
  first crossing a block or more ahead waits in ``later`` until its step.
* :class:`Buckets`, with a decode that hashes its blocks as they fill: its room alternates
  between the end of the table and one token short of the next unhashed block (a hash
  crossing, then a new block), so each crossing says when the next one is: a dict of
  step -> slots.

Both answer ``due(k)`` (the slots crossing at step ``k``, sorted), ``add(s, step, k)`` (slot
``s`` next crosses at ``step``; ``k`` is the next step the stretch runs) and ``remove(s, k)``
(a slot that finished in step ``k``), and keep ``next`` (the next step with a crossing).
"""

from __future__ import annotations

import math


class Ring:
    """Crossings that only take a block: every ``B`` steps from each slot's first."""

    periodic = True  # a slot stays scheduled after crossing (``add`` only for its first)

    def __init__(self, B: int) -> None:
        self.B = B
        self.ring: list[list[int]] = [[] for _ in range(B)]  # step % B -> slots
        self.later: dict[int, list[int]] = {}  # first crossings B or more steps ahead
        self.first: dict[int, int] = {}  # slot -> its first crossing step
        self.next = math.inf

    def add(self, s: int, step: int, k: int) -> None:
        self.first[s] = step
        if step < k + self.B:  # no step of its residue runs before ``step``
            self.ring[step % self.B].append(s)
        else:
            self.later.setdefault(step, []).append(s)
        if step < self.next:
            self.next = step

    def due(self, k: int) -> list[int]:
        ring, B = self.ring, self.B
        slots = ring[k % B]
        if self.later:
            first = self.later.pop(k, None)
            if first is not None:
                slots += first
                slots.sort()
            self.next = self._after(k)
        elif ring[(k + 1) % B]:  # _after(k), its usual answer first: the next step crosses too
            self.next = k + 1
        else:
            self.next = self._after(k)
        return slots

    def remove(self, s: int, k: int) -> None:
        step = self.first.pop(s)
        waiting = self.later.get(step)
        if waiting is not None and s in waiting:  # its first crossing is still ahead
            waiting.remove(s)
            if not waiting:
                del self.later[step]
        else:
            self.ring[step % self.B].remove(s)
        self.next = self._after(k)

    def _after(self, k: int) -> float:
        """The first step after ``k`` with a crossing."""
        ring, B = self.ring, self.B
        nxt = math.inf
        for d in range(1, B + 1):
            if ring[(k + d) % B]:
                nxt = k + d
                break
        if self.later:
            first = min(self.later)
            if first < nxt:
                nxt = first
        return nxt


class Buckets:
    """Crossings of decodes that hash as they fill: each crossing schedules the slot's next."""

    periodic = False

    def __init__(self) -> None:
        self.at: dict[int, list[int]] = {}  # step -> slots
        self.step_of: dict[int, int] = {}  # slot -> its step in ``at``
        self.next = math.inf

    def add(self, s: int, step: int, k: int) -> None:
        self.at.setdefault(step, []).append(s)
        self.step_of[s] = step
        if step < self.next:
            self.next = step

    def due(self, k: int) -> list[int]:
        slots = self.at.pop(k)
        slots.sort()
        self.next = min(self.at) if self.at else math.inf
        return slots

    def remove(self, s: int, k: int) -> None:
        step = self.step_of.pop(s)
        bucket = self.at.get(step)
        if bucket is not None and s in bucket:
            bucket.remove(s)
            if not bucket:
                del self.at[step]
                self.next = min(self.at) if self.at else math.inf

"""The decoding requests of a macro-step stretch (sim/engine/macro.py), by slot.

A slot is a request's place in the stretch, handed out in running order: the requests
running when the stretch starts get slots 0..n-1, and a request admitted during it gets the
next one once its prefill is done, as ``_mark_admitted`` appends it to ``running``. So
sorting slots sorts requests in scheduling order. Per slot the batch keeps what a step
changes only by one token (computed and generated tokens, as offsets from the step index
``k``) and what changes only at a block crossing (the slots it holds); a request's own
counters are written back when the stretch ends, and for a request that finishes, when it
finishes. Two buckets say which slots act at which step: ``cross`` (its next token does
not fit ``slot_room``: ``allocate_slots`` is due) and ``fin`` (its last token).

The running sums that ``StepLog.record`` would recompute over every running request each
step (held slots, computed tokens, ``min(held, final)``) are updated where they change.
"""

from __future__ import annotations

import math

from sim.request import Request


class DecodeBatch:
    """Slots of decoding requests; ``n`` of them live."""

    def __init__(self, running: list[Request], alloc) -> None:
        self.alloc = alloc
        self.B = B = alloc.block_size
        self.tables = tables = alloc.block_tables
        self.plain = not alloc.prefix_caching  # a crossing takes exactly one block (no hashing)
        reqs = self.reqs = list(running)
        cb = self.cb = [r.num_computed_tokens for r in reqs]  # computed tokens at step 0
        gb = self.gb = [r.num_generated for r in reqs]  # at step k: cb + k, gb + k
        self.finals = finals = [r.num_prompt_tokens + r.num_output_tokens for r in reqs]
        self.tbls = tbls = [tables[r.request_id] for r in reqs]  # block tables (lists kept in place)
        self.helds = helds = [len(t) * B for t in tbls]
        self.alive = [True] * len(reqs)
        self.n = len(reqs)
        self.s_held, self.s_comp = sum(helds), sum(cb)
        self.s_minhf = sum([h if h < f else f for h, f in zip(helds, finals)])
        cross: dict[int, list[int]] = {}  # step -> slots calling allocate_slots at its start
        nxt = self.nxt = []  # slot -> its step in ``cross``
        for i, r in enumerate(reqs):
            room = r.slot_room - cb[i]
            step = room if room > 0 else 0
            nxt.append(step)
            cross.setdefault(step, []).append(i)
        fin: dict[int, list[int]] = {}  # step -> slots whose last token it computes
        for i, r in enumerate(reqs):
            fin.setdefault(r.num_output_tokens - gb[i] - 1, []).append(i)
        self.cross, self.fin = cross, fin
        self.next_cross = min(cross)
        self.num_free = alloc.pool.num_free  # the pool's free blocks (``refresh`` after others take or free some)

    def refresh(self) -> None:
        """Re-read the pool's free blocks (after an admission or a finish)."""
        self.num_free = self.alloc.pool.num_free

    def cross_at(self, k: int) -> int:
        """``allocate_slots(req, 1)`` for each slot whose next token at step ``k`` does not
        fit its room, in scheduling order, then their next crossings; returns how many. 0
        (and nothing allocated) if they might not all get a block: an allocation could
        preempt."""
        slots = self.cross.pop(k)
        if len(slots) > self.num_free:
            return 0
        slots.sort()
        reqs, cb, helds, finals, tbls, nxt, B = self.reqs, self.cb, self.helds, self.finals, self.tbls, self.nxt, self.B
        cross = self.cross
        s_minhf = self.s_minhf
        if self.plain:  # no prefix caching: one block each, one pop for all
            for s, block in zip(slots, self.alloc.pool.pop_free_many(len(slots))):
                table = tbls[s]
                table.append(block)
                h = helds[s] = reqs[s].slot_room = len(table) * B  # _set_room: the table's slots
                f = finals[s]
                if h - B < f:  # min(held, final) grew
                    s_minhf += (h if h < f else f) - (h - B)
                step = h - cb[s]  # the next token that does not fit: computed cb + step + 1 > h
                step = nxt[s] = step if step > k else k + 1
                cross.setdefault(step, []).append(s)
            self.s_held += B * len(slots)
            self.num_free -= len(slots)
        else:
            gb, allocate = self.gb, self.alloc.decode_slot
            s_held = self.s_held
            for s in slots:
                r = reqs[s]
                r.num_computed_tokens = cb[s] + k
                r.num_generated = gb[s] + k
                allocate(r)  # allocate_slots(r, 1)
                h_old, f = helds[s], finals[s]
                h = helds[s] = len(tbls[s]) * B
                s_held += h - h_old
                s_minhf += (h if h < f else f) - (h_old if h_old < f else f)
                room = r.slot_room - (cb[s] + k)
                step = nxt[s] = k + (room if room > 1 else 1)
                cross.setdefault(step, []).append(s)
            self.s_held = s_held
            self.num_free = self.alloc.pool.num_free  # a hash crossing takes no block
        self.s_minhf = s_minhf
        self.next_cross = min(cross)
        return len(slots)

    def admitted(self, scheduled: list, k: int, start_s: float, end_s: float):
        """The update (``update_from_output``) of the requests admitted at step ``k``, which
        ran from ``start_s`` to ``end_s``. A request whose prompt is done takes the next slot;
        one still prefilling (a chunk) stays out of the batch. Returns (requests that sampled
        a token, requests that finished, whether one is still prefilling)."""
        produced, done, partial = [], [], False
        tables, B = self.tables, self.B
        for req, m in scheduled:
            if req.admitted_s is None:
                req.admitted_s = start_s
            computed = req.num_computed_tokens + m
            req.num_computed_tokens = computed
            generated = req.num_generated
            held = len(tables[req.request_id]) * B
            final = req.num_prompt_tokens + req.num_output_tokens
            if computed != req.num_prompt_tokens + generated:  # a chunk: still prefilling
                partial = True
                self._add_sums(held, computed, final)
                continue
            generated += 1
            req.num_generated = generated
            if req.first_token_s is None:
                req.first_token_s = end_s
            produced.append(req)
            if generated >= req.num_output_tokens:
                req.last_token_s = end_s
                done.append(req)
                continue
            s = len(self.reqs)  # the next slot; at step k + 1 it holds computed, generated
            self.reqs.append(req)
            self.tbls.append(tables[req.request_id])
            self.cb.append(computed - k - 1)
            self.gb.append(generated - k - 1)
            self.finals.append(final)
            self.helds.append(held)
            self.alive.append(True)
            self.n += 1
            self._add_sums(held, computed, final)
            room = req.slot_room - computed
            step = k + 1 + (room if room > 0 else 0)
            self.nxt.append(step)
            self.cross.setdefault(step, []).append(s)
            if step < self.next_cross:
                self.next_cross = step
            self.fin.setdefault(req.num_output_tokens - generated + k, []).append(s)
        return produced, done, partial

    def _add_sums(self, held: int, computed: int, final: int) -> None:
        self.s_held += held
        self.s_comp += computed
        self.s_minhf += held if held < final else final

    def finish(self, slots: list[int] | None, also: list[Request], k: int, end_s: float, sched) -> list[Request]:
        """Step ``k`` computed the last token of ``slots`` (and of ``also``, admitted in it):
        the rest of the scheduler's update. Their counters are written back, then they finish
        in scheduling order (``_finish`` frees their blocks). Returns them in that order."""
        done = []
        if slots:
            slots.sort()
            reqs, cb, gb, alive = self.reqs, self.cb, self.gb, self.alive
            helds, finals = self.helds, self.finals
            for s in slots:
                r = reqs[s]
                computed = r.num_computed_tokens = cb[s] + k + 1
                r.num_generated = gb[s] + k + 1
                r.last_token_s = end_s
                alive[s] = False
                self._uncross(s)
                h, f = helds[s], finals[s]
                self.s_held -= h
                self.s_minhf -= h if h < f else f
                self.s_comp -= computed
                done.append(r)
            self.n -= len(slots)
        done += also
        for r in done:
            sched._finish(r, end_s)  # leaves ``running``, frees its blocks
        self.refresh()
        return done

    def _uncross(self, s: int) -> None:
        """Take finished slot ``s`` out of its crossing bucket."""
        step = self.nxt[s]
        bucket = self.cross.get(step)
        if bucket is not None:
            bucket.remove(s)
            if not bucket:
                del self.cross[step]
                if step == self.next_cross:
                    self.next_cross = min(self.cross) if self.cross else math.inf

    def write_back(self, k: int) -> None:
        """Each live request's counters at the start of step ``k`` (the stretch ends)."""
        for r, c, g, a in zip(self.reqs, self.cb, self.gb, self.alive):
            if a:
                r.num_computed_tokens = c + k
                r.num_generated = g + k

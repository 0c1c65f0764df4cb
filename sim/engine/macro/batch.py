"""The decoding requests of a macro-step stretch (sim/engine/macro/run.py), by slot.

A slot is a request's place in the stretch, handed out in running order: the requests
running when the stretch starts get slots 0..n-1, and a request admitted during it gets the
next one once its prefill is done, as ``_mark_admitted`` appends it to ``running``. So
sorting slots sorts requests in scheduling order. Per slot the batch keeps what a step
changes only by one token (computed and generated tokens, as offsets from the step index
``k``); a request's own counters (and, when every crossing only takes a block, its
``slot_room``) are written back when the stretch ends, and a finishing request's when it finishes. Two
schedules say which slots act at which step: the crossings (sim/engine/macro/cross.py:
``allocate_slots`` is due) and ``fin`` (its last token).

The running sums that ``StepLog.record`` would recompute over every running request each
step (held slots, computed tokens, ``min(held, final)``) are updated where they change.
"""

from __future__ import annotations

from sim.engine.macro.cross import Buckets, Ring
from sim.request import Request


class DecodeBatch:
    """Slots of decoding requests; ``n`` of them live."""

    def __init__(self, running: list[Request], alloc) -> None:
        self.alloc = alloc
        self.B = B = alloc.block_size
        self.tables = tables = alloc.block_tables
        self.plain = not alloc.prefix_caching  # no hashes: a crossing evicts nothing (the gauges)
        reqs = self.reqs = list(running)
        cb = self.cb = [r.num_computed_tokens for r in reqs]  # computed tokens at step 0
        gb = self.gb = [r.num_generated for r in reqs]  # at step k: cb + k, gb + k
        self.finals = finals = [r.num_prompt_tokens + r.num_output_tokens for r in reqs]
        self.tbls = tbls = [tables[r.request_id] for r in reqs]  # block tables (lists kept in place)
        helds = [len(t) * B for t in tbls]
        self.alive = [True] * len(reqs)
        self.n = len(reqs)
        self.s_held, self.s_comp = sum(helds), sum(cb)
        self.s_minhf = sum([h if h < f else f for h, f in zip(helds, finals)])
        # ``quick``: a slot whose crossings only take a block, every B steps (no prefix
        # caching, or one that hashes nothing more until freed: sim/kv/paged.py's own blocks).
        # When all are, the crossings are a ``Ring``; a slot that hashes joins only as the
        # stretch's last step (``join``).
        hashes = alloc.decode_hashes
        self.quick = quick = [not hashes(r) for r in reqs]
        self.ring = all(quick)
        self.cross = cross = Ring(B) if self.ring else Buckets()
        #: (Ring) step -> how much less than ``B`` the crossings at that step add to
        #: ``min(held, final)``: a slot's last block, which holds fewer than B of its tokens.
        self.short: dict[int, int] = {}
        for i, r in enumerate(reqs):
            room = r.slot_room - cb[i]
            cross.add(i, room if room > 0 else 0, 0)
            if self.ring:
                self._last_block(helds[i], finals[i], room if room > 0 else 0)
        fin: dict[int, list[int]] = {}  # step -> slots whose last token it computes
        for i, r in enumerate(reqs):
            fin.setdefault(r.num_output_tokens - gb[i] - 1, []).append(i)
        self.fin = fin
        self.num_free = alloc.pool.num_free  # the pool's free blocks (``refresh`` after others take or free some)
        self.pop_free_many = alloc.pool.pop_free_many

    def refresh(self) -> None:
        """Re-read the pool's free blocks (after an admission or a finish)."""
        self.num_free = self.alloc.pool.num_free

    def cross_at(self, k: int) -> int:
        """``allocate_slots(req, 1)`` for each slot whose next token at step ``k`` does not
        fit its room, in scheduling order; returns how many. 0 (and nothing allocated) if
        they might not all get a block: an allocation could preempt."""
        slots = self.cross.due(k)
        if len(slots) > self.num_free:
            return 0
        cb, finals, tbls, B = self.cb, self.finals, self.tbls, self.B
        s_minhf = self.s_minhf
        if self.ring:  # one block each, one pop for all; the room is written back at the end
            m = len(slots)
            for s, block in zip(slots, self.pop_free_many(m)):
                tbls[s].append(block)
            # min(held, final) grew by min(B, final - held before): B but at a slot's last block
            s_minhf += B * m - self.short.pop(k, 0)
            self.s_held += B * m
            self.num_free -= m
        else:
            reqs, gb, allocate, add, quick = self.reqs, self.gb, self.alloc.decode_slot, self.cross.add, self.quick
            s_held = self.s_held
            for s in slots:
                r = reqs[s]
                if quick[s]:  # decode_slot without hashing: one block, room to its end
                    table = tbls[s]
                    table += self.pop_free_many(1)
                    h, f = len(table) * B, finals[s]
                    s_held += B
                    if h - B < f:
                        s_minhf += (h if h < f else f) - (h - B)
                    r.slot_room = h
                    add(s, k + B, k + 1)
                    continue
                h_old = len(tbls[s]) * B
                r.num_computed_tokens = cb[s] + k
                r.num_generated = gb[s] + k
                allocate(r)  # allocate_slots(r, 1)
                h, f = len(tbls[s]) * B, finals[s]
                s_held += h - h_old
                s_minhf += (h if h < f else f) - (h_old if h_old < f else f)
                room = r.slot_room - (cb[s] + k)
                add(s, k + (room if room > 1 else 1), k + 1)
            self.s_held = s_held
            self.num_free = self.alloc.pool.num_free  # a hash crossing takes no block
        self.s_minhf = s_minhf
        return len(slots)

    def join(self, scheduled: list, done: list[Request], sampled: list[Request], k: int) -> bool:
        """After the scheduler's update of the requests admitted at step ``k`` (``scheduled``;
        ``done``: those it finished, ``sampled``: those that sampled a token): one whose
        prompt is done takes the next slot; one still prefilling (a chunk) stays out of the
        batch. Returns whether one is still prefilling (the stretch ends after the step)."""
        partial = False
        tables, B = self.tables, self.B
        took = {r.request_id for r in sampled}
        gone = {r.request_id for r in done}
        for req, _ in scheduled:
            rid = req.request_id
            if rid in gone:
                continue
            computed, generated = req.num_computed_tokens, req.num_generated
            held = len(tables[rid]) * B
            final = req.num_prompt_tokens + req.num_output_tokens
            self._add_sums(held, computed, final)
            if rid not in took:  # a chunk: still prefilling
                partial = True
                continue
            s = len(self.reqs)  # the next slot; at step k + 1 it holds computed, generated
            self.reqs.append(req)
            self.tbls.append(tables[rid])
            self.cb.append(computed - k - 1)
            self.gb.append(generated - k - 1)
            self.finals.append(final)
            self.alive.append(True)
            quick = not self.alloc.decode_hashes(req)
            self.quick.append(quick)
            if self.ring and not quick:  # the Ring cannot schedule its hashing: the stretch ends
                partial = True
            self.n += 1
            room = req.slot_room - computed
            self.cross.add(s, k + 1 + (room if room > 0 else 0), k + 1)
            if self.ring:
                self._last_block(held, final, k + 1 + (room if room > 0 else 0))
            self.fin.setdefault(req.num_output_tokens - generated + k, []).append(s)
        return partial

    def _last_block(self, held: int, final: int, first: int) -> None:
        """(Ring) A slot holding ``held`` slots of its ``final`` tokens crosses first at step
        ``first``, then every ``B`` steps, a block each, until it holds the ``final - 1`` slots
        its last step needs: note the step of the crossing that takes its last block and how
        much short of ``B`` it adds to ``min(held, final)`` (each crossing adds
        ``min(B, final - held before)``)."""
        if held < final - 1:  # (its last token is sampled, never computed: it needs final - 1 slots)
            B = self.B
            n = -(-(final - 1 - held) // B)  # crossings left
            short = held + n * B - final
            if short > 0:
                step = first + (n - 1) * B
                self.short[step] = self.short.get(step, 0) + short

    def _add_sums(self, held: int, computed: int, final: int) -> None:
        self.s_held += held
        self.s_comp += computed
        self.s_minhf += held if held < final else final

    def finish(self, slots: list[int], k: int, end_s: float, sched) -> list[Request]:
        """Step ``k`` computed the last token of ``slots``: the rest of the scheduler's
        update. Their counters are written back, then they finish in scheduling order
        (``_finish`` frees their blocks). Returns them in that order."""
        done = []
        if slots:
            slots.sort()
            reqs, cb, gb, alive, tbls, finals, B = self.reqs, self.cb, self.gb, self.alive, self.tbls, self.finals, self.B
            for s in slots:
                r = reqs[s]
                computed = r.num_computed_tokens = cb[s] + k + 1
                r.num_generated = gb[s] + k + 1
                r.last_token_s = end_s
                alive[s] = False
                self.cross.remove(s, k)
                h, f = len(tbls[s]) * B, finals[s]
                self.s_held -= h
                self.s_minhf -= h if h < f else f
                self.s_comp -= computed
                done.append(r)
            self.n -= len(slots)
        for r in done:
            sched._finish(r, end_s)  # leaves ``running``, frees its blocks
        self.refresh()
        return done

    def write_back(self, k: int, token_s: float) -> None:
        """Each live request's counters at the start of step ``k`` (the stretch ends), and when
        its latest token was delivered, ``token_s`` (every one had a token in the last step)."""
        ring, B = self.ring, self.B
        for r, c, g, a, table, quick in zip(self.reqs, self.cb, self.gb, self.alive, self.tbls, self.quick):
            if a:
                r.token_s = token_s
                r.num_computed_tokens = c + k
                r.num_generated = g + k
                if ring and quick:
                    r.slot_room = len(table) * B  # _set_room: the table's slots

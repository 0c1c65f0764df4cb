"""Macro-steps: many decode steps at once, with exactly the results of stepping one by one.

Between events, a batch of decodes evolves predictably: every running request computes one
token a step and no one is admitted. :class:`DecodeRun` finds such a stretch at a step
boundary and advances it in one go, doing per step only what changes:

* the step's time, from the cost model on the step's shape (``num_seqs`` decodes over
  ``sum(computed + 1)`` KV tokens, which grows by the batch size each step; a datasheet
  model's ``decode_time_fn`` adds up the terms that do not depend on the KV once), added to
  the clock by the same float additions the step-by-step loop makes;
* the allocator calls the scheduler would make: a request whose next token does not fit
  its ``slot_room`` calls ``allocate_slots`` at exactly the step and in exactly the order it
  would have (requests are bucketed by the step of their next crossing), so blocks are
  taken, hashed and evicted in the same sequence;
* the step log's row, from running sums of held, computed and final tokens updated at
  those crossings (the same integers ``StepLog.record`` sums over every request);
* the front end's streaming work (one token per request per step).

A stretch may start when the scheduler is continuous (chunked or not), the allocator paged
without a token budget, every running request is decoding, nothing is swapped, no waiting
request can be admitted before the stretch's last step (``DecodeRun._waiting_stays``: e.g.
``max_num_seqs`` are running), the batch fits the token budget, and no step hook or
checking step log watches. It ends:

* with the first step in which requests finish: that step does the scheduler's update
  (counters, ``last_token_s``, then ``_finish`` in scheduling order, which frees their
  blocks), logs its row after the frees as ``StepLog.record`` would, and stamps the front
  end's answer; the engine loop then asks for their follow-up turns and retires them, as
  after a normal step (``DecodeRun.finished``);
* before a step whose crossings could exhaust the free blocks (an allocation there might
  preempt: the normal path decides);
* at the next SimPy event (an arrival, a follow-up turn, a request leaving the front end).
  In a lone engine no event reads the engine mid-step, so the stretch ends *with* the step
  the event falls within; its row (whose waiting count includes the arrivals) and its
  streaming are done at its end, after the event. A cluster's replica (``stepwise``) yields
  to the clock at every step instead (its router reads it, and other replicas' events fall
  between its steps): each step's allocations are made at its start and its update at its
  end, as stepping one by one would, and the stretch ends after the step during which a
  request was routed to it. A disaggregated pool's replicas end every stretch strictly
  before the next event.

Requests' counters are written back before the clock moves. ``tests/sim/engine/
test_macro_steps.py`` runs every shipped scenario both ways and requires identical outputs.
"""

from __future__ import annotations

import math

from sim.cost.shape import BatchShape
from sim.engine.metrics import StepLog
from sim.kv.paged import PagedAllocator
from sim.sched.continuous import ContinuousScheduler

#: Shortest stretch worth the set-up (a shorter one runs step by step).
MIN_STEPS = 1


class DecodeRun:
    """Advances stretches of pure decode steps for one :class:`~sim.engine.simulation.Simulation`."""

    def __init__(self, sim) -> None:
        self.sim = sim
        sched, alloc = sim.scheduler, sim.allocator
        self.finished: list = []  # requests the last stretch's final step finished (scheduling order)
        # A stretch may end with the step within which the next event falls when no event can
        # see the engine mid-step: a lone engine (a cluster's router reads its replicas).
        self.straddle = getattr(sim, "macro_straddles", False)
        # A cluster's replica (no disaggregation) yields to the clock step by step instead: the
        # router and the other replicas run between its steps (module docstring).
        self.stepwise = getattr(sim, "macro_stepwise", False)
        self.enabled = (type(sched) is ContinuousScheduler and type(alloc) is PagedAllocator
                        and not alloc._bounded and sim.core.hook is None
                        and type(sim.core.steps) is StepLog)

    def _eligible(self) -> bool:
        sched = self.sim.scheduler
        running = sched.running
        if not running or sched.swapped or len(running) > sched.max_num_batched_tokens:
            return False
        if sched.waiting and not self._waiting_stays(sched):
            return False
        for r in running:
            if not (r.num_generated > 0 and r.num_computed_tokens == r.num_prompt_tokens + r.num_generated - 1):
                return False
        return True

    def _waiting_stays(self, sched) -> bool:
        """Whether the scheduler's admission pass (``_admit_waiting``) admits and rejects
        nothing at every step of a stretch of the running decodes. It stops at once when
        ``max_num_seqs`` are running, or when its first request's prompt does not fit the
        budget the decodes leave (unchunked), or does not fit the free blocks: a stretch
        takes blocks and frees none before its last step's update, and the budget and the
        running count do not change. Not decided here (the normal path runs): prefix
        caching (a hit may shrink what the request needs), rejection when full, prefill-first
        steps, and a request that still holds blocks."""
        n_running = len(sched.running)
        if n_running >= sched.max_num_seqs:
            return True
        alloc = self.sim.allocator
        if alloc.prefix_caching or sched.reject_when_full or sched.prefill_first:
            return False
        budget = sched.max_num_batched_tokens - n_running  # what the decodes leave
        if budget <= 0:
            return True
        req = sched.waiting[0]
        if req.request_id in alloc.block_tables:
            return False
        n = req.num_tokens - req.num_computed_tokens
        if n > budget:
            if not sched.chunked:
                return True  # head-of-line: the prompt waits whole
            n = budget
        B = alloc.block_size
        need = -(-(req.num_computed_tokens + n) // B)
        return need > alloc.pool.num_free - -(-sched.watermark_slots // B)

    def run(self):
        """A SimPy sub-process: advance a stretch of decode steps if one starts now; returns
        how many steps it advanced (0: none, the caller steps normally)."""
        self.finished = []
        if not self.enabled or not self._eligible():
            return 0
        sim = self.sim
        env, core, sched, alloc = sim.env, sim.core, sim.scheduler, sim.allocator
        running = list(sched.running)
        n = len(running)
        c0 = [r.num_computed_tokens for r in running]
        g0 = [r.num_generated for r in running]
        outs = [r.num_output_tokens for r in running]
        left = min([o - g for o, g in zip(outs, g0)])  # the last step: requests finish (below)
        if left < MIN_STEPS:
            return 0
        stepwise = self.stepwise
        t_next = math.inf if stepwise else env.peek()
        now = env.now
        idle = idle0 = math.inf if core.last_end_s is None else now - core.last_end_s
        cost = sim.cost
        step_time = cost.step_time_s
        t_first = now + step_time(BatchShape(n, 0, n, sum(c0) + n, 0.0, 0, 0), idle0)
        if not t_first < t_next and not (self.straddle and now < t_next < t_first):
            return 0  # the first step already meets the next event (a cluster's other replicas)
        B = alloc.block_size
        pool = alloc.pool
        tables = alloc.block_tables  # held_slots(r), inlined: len(table) x block_size
        plain = not alloc.prefix_caching  # a crossing takes exactly one block (no hashing)
        # step -> indices (into ``running``) of the requests that call allocate_slots then
        buckets: dict[int, list[int]] = {}
        finals = [r.num_prompt_tokens + o for r, o in zip(running, outs)]
        helds = [len(tables.get(r.request_id, ())) * B for r in running]
        s_held, s_comp = sum(helds), sum(c0)
        s_minhf = sum([h if h < f else f for h, f in zip(helds, finals)])
        for i, r in enumerate(running):
            room = r.slot_room - c0[i]
            buckets.setdefault(room if room > 0 else 0, []).append(i)
        next_cross = min(buckets)
        kv = s_comp + n  # decode_kv_tokens of the first step: sum(computed + 1)
        fast = getattr(cost, "decode_time_fn", None)
        fast = fast(n, n) if fast is not None else None  # kv -> the step's time, idle 0
        fe = sim.frontend
        token_work = fe.token_s * n if fe is not None else 0.0
        allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
        frag = alloc.num_external_fragmentation_slots()
        num_waiting = len(sched.waiting)  # inert through the stretch (_waiting_stays)
        t = now
        done = 0
        durations: list[float] = []
        pending = None  # the row of a last step that an event falls within (``straddle``)
        doubles: list[float] = []  # the step log's rows (StepLog.append_rows)
        counts: list[int] = []
        while done < left:
            crossing = None
            if done == next_cross:
                crossing = buckets.pop(done)
                if len(crossing) > pool.num_free:
                    buckets[done] = crossing
                    break  # an allocation might fail and preempt: the normal path decides
            if fast is not None and idle == 0.0:
                d = fast(kv)
            else:
                d = step_time(BatchShape(n, 0, n, kv, 0.0, 0, 0), idle)
            t_end = t + d
            straddling = not t_end < t_next  # never when stepwise (no bound)
            if straddling and not (self.straddle and t < t_next < t_end):
                if crossing is not None:
                    buckets[done] = crossing
                break
            durations.append(d)
            if crossing is not None:
                crossing.sort()
                if plain:  # allocate_slots without prefix caching: one block each, one pop for all
                    for i, block in zip(crossing, pool.pop_free_many(len(crossing))):
                        table = tables[running[i].request_id]
                        table.append(block)
                        running[i].slot_room = len(table) * B  # _set_room: the table's slots
                else:
                    for i in crossing:
                        r = running[i]
                        r.num_computed_tokens = c0[i] + done
                        r.num_generated = g0[i] + done
                        alloc.allocate_slots(r, 1)  # cannot fail: enough free blocks (checked)
                for i in crossing:  # the running sums and each request's next crossing
                    r = running[i]
                    h_old, f = helds[i], finals[i]
                    h = helds[i] = len(tables[r.request_id]) * B
                    s_held += h - h_old
                    s_minhf += (h if h < f else f) - (h_old if h_old < f else f)
                    room = r.slot_room - (c0[i] + done)
                    buckets.setdefault(done + (room if room > 1 else 1), []).append(i)
                next_cross = min(buckets) if buckets else left
                allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
                frag = alloc.num_external_fragmentation_slots()
            if stepwise:  # the step runs on the clock; the router may route to this replica meanwhile
                yield env.timeout(d)
                num_waiting = len(sched.waiting)
            s_comp += n  # the step's update: every request computed one token
            num_running = n
            finished = None
            if done == left - 1:  # requests finish: the scheduler's update (update_from_output)
                for i, r in enumerate(running):
                    r.num_computed_tokens = c0[i] + left
                    r.num_generated = g0[i] + left
                finished = [i for i, r in enumerate(running) if r.num_generated >= outs[i]]
                for i in finished:
                    running[i].last_token_s = t_end
                for i in finished:
                    sched._finish(running[i], t_end)  # leaves ``running``, frees its blocks
                    h, f = helds[i], finals[i]
                    s_held -= h
                    s_minhf -= h if h < f else f
                    s_comp -= c0[i] + left
                num_running -= len(finished)
                allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
                frag = alloc.num_external_fragmentation_slots()
            row = (n, 0, n, 0, num_waiting, num_running, 0, 0, allocated - s_held + s_comp, allocated,
                   s_minhf - s_comp, s_held - s_minhf, frag, cached_free)
            if straddling:  # logged and streamed at its end, after the events within it
                pending = (t_end, t_end - t, row, finished)
            else:
                doubles += (t_end, t_end - t, 0.0)  # the step's duration as the clock saw it (not d)
                counts += row
                if fe is not None:
                    self._stream(fe, t_end, token_work, running, finished)
            t = t_end
            done += 1
            if finished is not None:
                self.finished = [running[i] for i in finished]
                break
            if straddling:
                break
            if stepwise and sched.waiting and not self._waiting_stays(sched):
                break  # a request routed here during the step: the normal path admits it now
            kv += n
            idle = 0.0
        if done == 0:
            return 0
        core.steps.append_rows(doubles, counts)
        if not self.finished:
            for i, r in enumerate(running):
                r.num_computed_tokens = c0[i] + done
                r.num_generated = g0[i] + done
        if not stepwise:
            yield from _advance_to(env, t, durations)
        if pending is not None:  # the last step, which an event fell within: requests may wait now
            t_end, duration, row, finished = pending
            core.steps.append_rows((t_end, duration, 0.0), (*row[:4], len(sched.waiting), *row[5:]))
            if fe is not None:
                self._stream(fe, t_end, token_work, running, finished)
        core.last_end_s = t
        core.idle_before_s = idle0 if done == 1 else 0.0  # as EngineStep.begin sets it for the last step
        return done


    @staticmethod
    def _stream(fe, t_end: float, token_work: float, running: list, finished: list[int] | None) -> None:
        """``FrontEnd.stream`` of a decode step ending at ``t_end`` (every request sampled a
        token; their first tokens went out long ago); ``finished``: indices whose answer ends."""
        answered = fe._run(t_end, token_work)
        if finished is not None:
            for i in finished:
                running[i].client_last_s = answered


def _advance_to(env, t: float, durations: list[float]):
    """Move the SimPy clock to exactly ``t``, the sum of ``durations`` added one by one to
    ``now``: in one timeout whose delay lands on ``t`` when one exists, else one per step."""
    delay = t - env.now
    for _ in range(4):
        if env.now + delay == t:
            yield env.timeout(delay)
            return
        delay = math.nextafter(delay, math.inf if env.now + delay < t else -math.inf)
    for d in durations:  # no delay rounds to t: the same additions as step by step
        yield env.timeout(d)

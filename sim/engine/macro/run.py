"""Macro-steps: many decode steps at once, with exactly the results of stepping one by one.

Between events, a batch of decodes evolves predictably: every running request computes one token a step.
:class:`DecodeRun` finds such a stretch at a step boundary and advances it in one go, doing per step only what changes:

* the step's time, from the cost model on the step's shape (``num_seqs`` decodes over
  ``sum(computed + 1)`` KV tokens, which grows by the batch size each step; a datasheet
  model's ``decode_time_fn`` adds up the terms that do not depend on the KV once per batch
  size), added to the clock by the same float additions the step-by-step loop makes;
* the allocator calls the scheduler would make: a request whose next token does not fit its ``slot_room`` calls
  ``allocate_slots`` at exactly the step and in exactly the order it would have (requests are bucketed by the
  step of their next crossing), so blocks are taken, hashed and evicted in the same sequence (macro/batch.py);
* the step log's row, from running sums of held, computed and final tokens updated at those crossings (the same
  integers ``StepLog.record`` sums over every request);
* the front end's streaming work (one token per request per step) and the tokens' gaps (ITL).

A stretch may start when the scheduler is continuous (chunked or not), the allocator paged
without a token budget, every running request is decoding, nothing is swapped, the batch
fits the token budget, and no step hook or checking step log watches. How far it goes
depends on who can see the engine between its steps:

* **A lone engine** (``straddle``): no event reads the engine mid-step, so the stretch runs up to the step within
  which the next event (an arrival, a follow-up turn, a request leaving the front end) falls, moves the clock to
  that step's end (the event runs) and logs and streams that step after it (its row's waiting count includes the
  arrivals). Then it goes on: a step whose start sees waiting requests runs the scheduler's own admission pass
  (``_admit_waiting``, after the step's crossings, as ``schedule`` orders them) and is priced with their prompt
  tokens; a request whose prompt is done joins the batch. A step in which requests finish does the scheduler's
  update (counters, ``last_token_s``, ``_finish`` in scheduling order, which frees their blocks), logs its row after
  the frees, streams, and then does what the engine loop does after such a step (``Simulation._after_finishing``:
  follow-up turns, retirement) with the clock at its end; the batch goes on without them.
* **A cluster's replica** (``stepwise``): its router reads it at arrivals, and other replicas' events fall between
  its steps. Its steps run off the clock until the time it may next be read or fed (``Replica.next_input_s``: the
  router's next pick, known ahead when no session has a follow-up turn; a request leaving its front end); the step
  that time falls within runs on the clock: its allocations and admissions at its start, the clock to its end (the
  router runs meanwhile), its update after. With follow-up turns every step runs on the clock. Otherwise it goes on
  as a lone engine does.
* **A disaggregated pool's replica** (neither): the stretch ends strictly before the next event and with the first
  step in which requests finish; no request is admitted in it (waiting requests must stay waiting:
  ``DecodeRun._waiting_stays``). After that step the decode pool serves hand-offs waiting for blocks
  (``EngineStep.after_stretch_finish``).

A stretch ends before a step whose crossings could exhaust the free blocks (an allocation might preempt: the
normal path decides), whose waiting requests the admission pass could take when admissions are not made in
stretches (vLLM V0's prefill-first steps, rejection when full), after a step that leaves an admitted prompt half
done (a chunk: its next step is not a decode), and when no decode is left. Running requests' counters are written
back when it ends (and a finishing request's when it finishes), its rows go to the step log then (or every
ROWS_PER_FLUSH), and its *quiet* steps run in a tight loop (sim/engine/macro/quiet.py). ``tests/sim/engine/
test_macro_steps.py`` runs every shipped scenario both ways and requires identical outputs.
"""

from __future__ import annotations

import math

from sim.cost.shape import BatchShape
from sim.engine.macro.batch import DecodeBatch
from sim.engine.macro.clock import advance_to, delivered, stream
from sim.engine.macro.quiet import ROWS_PER_FLUSH, quiet_steps
from sim.engine.logs.metrics import StepLog
from sim.kv.paged import PagedAllocator
from sim.sched.continuous import ContinuousScheduler
from sim.sched.output import SchedulerOutput

_UNSET = object()


class DecodeRun:
    """Advances stretches of decode steps for one :class:`~sim.engine.simulation.Simulation`."""

    def __init__(self, sim) -> None:
        self.sim = sim
        sched, alloc = sim.scheduler, sim.allocator
        self.straddle = getattr(sim, "macro_straddles", False)
        self.stepwise = getattr(sim, "macro_stepwise", False)
        self.goes_on = self.straddle or self.stepwise  # past events and finishing steps
        self.enabled = (type(sched) is ContinuousScheduler and type(alloc) is PagedAllocator
                        and not alloc._bounded and sim.core.hook is None
                        and type(sim.core.steps) is StepLog and sched.scheduler_steps == 1)
        # Waiting requests are admitted in a stretch by the scheduler's own admission pass,
        # except where a step with admissions is not a decode step plus prompts (vLLM V0's
        # prefill-first) or rejects requests (rejection when full): the normal path does those.
        self.admits = self.goes_on and self.enabled and not sched.prefill_first and not sched.reject_when_full
        self._fast: dict[int, object] = {}  # batch size -> decode_time_fn (the cost model is fixed)
        # A replica's steps go on the clock from the time it may next be read or fed on
        # (``next_input_s``: the router's next pick, a request leaving its front end); when that
        # is not known ahead (conversations: a follow-up turn may come at any step), every step.
        bound = getattr(sim, "next_input_s", None)
        self._next_input = bound if self.stepwise and bound is not None else (lambda: -math.inf)

    def _decode_fn(self, n: int):
        fn = self._fast.get(n, _UNSET)
        if fn is _UNSET:
            make = getattr(self.sim.cost, "decode_time_fn", None)
            fn = self._fast[n] = make(n, n) if make is not None else None
        return fn

    def _eligible(self) -> bool:
        sched = self.sim.scheduler
        running = sched.running
        if not running or sched.swapped or sched.lagging or len(running) > sched.max_num_batched_tokens:
            return False
        if sched.waiting and not self.admits and not self._waiting_stays(sched):
            return False
        for r in running:
            if not (r.num_generated > 0 and r.num_computed_tokens == r.num_prompt_tokens + r.num_generated - 1):
                return False
        return True

    def _waiting_stays(self, sched) -> bool:
        """Whether the scheduler's admission pass (``_admit_waiting``) admits and rejects nothing at a step of
        the running decodes, judged before the step's crossings (which only take blocks). It stops at once
        when ``max_num_seqs`` are running, or when its first request's prompt does not fit the budget the
        decodes leave (unchunked), or does not fit the free blocks. Not decided here (the admission pass
        runs): prefix caching (a hit may shrink what the request needs), rejection when full, prefill-first
        steps, the full-length reservation, and a request that still holds blocks."""
        n_running = len(sched.running)
        if n_running >= sched.max_num_seqs:
            return True
        alloc = self.sim.allocator
        if alloc.prefix_caching or sched.reject_when_full or sched.prefill_first or sched.reserve_full_length:
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
        return not alloc.fits_fresh(req.num_computed_tokens + n, sched.watermark_slots)

    def run(self):
        """A SimPy sub-process: advance a stretch of decode steps if one starts now; returns
        how many steps it advanced (0: none, the caller steps normally)."""
        if not self.enabled or not self._eligible():
            return 0
        sim = self.sim
        env, core, sched, alloc = sim.env, sim.core, sim.scheduler, sim.allocator
        b = DecodeBatch(sched.running, alloc)
        stepwise, goes_on, admits = self.stepwise, self.goes_on, self.admits
        budget, chunked, max_tokens = alloc.budget, sched.chunked, sched.max_num_batched_tokens
        fe, itl, step_time = sim.frontend, sim.itl, sim.cost.step_time_s
        gaps, tallies = itl.gaps, itl.counts  # ItlLog.tokens inlined below (flush takes from them in place)
        token_s, one_cpu = (fe.token_s, fe.servers == 1) if fe is not None else (0.0, False)
        self.fe, self.itl, self.steps, self.token_s, self.one_cpu = fe, itl, core.steps, token_s, one_cpu  # (quiet_steps)
        next_input = self._next_input
        t_next = next_input() if stepwise else env.peek()
        t = env.now
        idle = idle0 = math.inf if core.last_end_s is None else t - core.last_end_s
        n = b.n
        fast = self._decode_fn(n)
        plain, ring, B, crossings, fins = b.plain, b.ring, b.B, b.cross, b.fin
        pool = alloc.pool
        # The row's gauges, refreshed where they change (a plain crossing takes one block each).
        allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
        frag = self.frag = alloc.num_external_fragmentation_slots()
        num_waiting, num_running = len(sched.waiting), len(sched.running)
        k = 0  # steps advanced
        last_out = None  # the admissions of the last step advanced
        k_flushed = 0  # steps whose rows went to the step log
        durations: list[float] = []  # since the clock last caught up (not stepwise)
        doubles: list[float] = []  # the step log's rows (StepLog.append_rows)
        counts: list[int] = []
        while True:
            if ring and k and fast is not None and not num_waiting and not sched.lagging and k not in fins:
                k0, (k, t, allocated, cached_free, doubles, counts, k_flushed, stop) = k, quiet_steps(  # quiet.py
                    self, b, k, t, t_next, n, fast, allocated, cached_free, num_running, durations, doubles, counts, k_flushed)
                last_out = last_out if k == k0 else None  # (no admissions in the last step advanced)
                if stop:
                    break
            admit = False
            if num_waiting and not self._waiting_stays(sched):
                if not admits:
                    break  # the normal path admits (or rejects) them
                admit = True
            crossing = k == crossings.next
            if crossing and goes_on:
                crossed = b.cross_at(k)
                if not crossed:
                    break  # an allocation might fail and preempt: the normal path decides
                if ring:  # one block each (evicting the hashes some carried: the pool counts them)
                    allocated += B * crossed
                    if not plain:
                        cached_free = pool.num_cached_free * B
                else:
                    allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
            kv = b.s_comp + n  # decode_kv_tokens: sum(computed + 1)
            out = None
            if admit:  # after the decodes' allocations, as ``schedule`` runs its phases
                out = SchedulerOutput(budget=budget)
                sched._admit_waiting(out, max_tokens - n, chunked)
                if out.scheduled:
                    b.refresh()
                    allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
                    num_waiting, num_running = len(sched.waiting), len(sched.running)
                    a = len(out.scheduled)
                    d = step_time(BatchShape(n + a, out.num_prefill_tokens, n + out.num_decode_tokens,
                                             kv + out.decode_kv_tokens, out.prefill_attn_pairs,
                                             out.prefill_kv_tokens, a - out.num_decode_tokens), idle)
                else:
                    out = None
            if sched.lagging:  # async scheduling's lag: the requests that finished in the last step
                sched.release_lagging()  # leave at the end of this step's ``schedule``, after its admissions
                allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
                num_running = len(sched.running)
            if out is None:  # (a step with admissions was priced with their prompts above)
                d = fast(kv) if fast is not None and idle == 0.0 else step_time(BatchShape(n, 0, n, kv, 0.0, 0, 0), idle)
            t_end = t + d
            straddling = not t_end < t_next  # stepwise: the step runs on the clock
            if straddling and not goes_on:
                break  # a disaggregated pool: the stretch ends before the event
            if crossing and not goes_on:  # (the step's time does not depend on it)
                if not b.cross_at(k):
                    break
                allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
            if stepwise and straddling:  # on the clock: the router may read or feed this replica meanwhile
                if durations:
                    yield from advance_to(env, t, durations)
                    durations = []
                yield env.timeout(d)
                num_waiting = len(sched.waiting)
            else:
                durations.append(d)
            after_events = straddling and not stepwise  # a lone engine's step an event fell within
            # The step's update: every decode computed one token; admitted prompts ran.
            b.s_comp += n
            fin = fins.pop(k, None)
            # decodes finish first: they come first in scheduling order
            finished = b.finish(fin, k, t_end, sched) if fin is not None else None
            if out is None:
                num_seqs, num_prefill, num_decode = n, 0, n
                produced = ()
            else:
                num_seqs, num_prefill, num_decode = n + a, out.num_prefill_tokens, n + out.num_decode_tokens
                done = sched.update_from_output(out, t_end, t)  # the admitted requests' update
                produced = sched.sampled
                partial = b.join(out.scheduled, done, produced, k)
                if done:
                    finished = done if finished is None else finished + done
                    b.refresh()
            if finished is not None:
                allocated, cached_free = alloc.num_allocated_slots(), alloc.num_cached_free_slots()
                num_running = len(sched.running)
            s_held, s_comp, s_minhf = b.s_held, b.s_comp, b.s_minhf
            if sched.lagging:  # finished but seated (async scheduling's lag): the row counts them running
                tables = alloc.block_tables
                for r in sched.lagging:
                    h, f = len(tables.get(r.request_id, ())) * B, r.num_prompt_tokens + r.num_output_tokens
                    s_held += h
                    s_minhf += h if h < f else f
                    s_comp += r.num_computed_tokens
            row = (num_seqs, num_prefill, num_decode, 0, num_waiting, num_running, 0, 0,
                   allocated - s_held + s_comp, allocated, s_minhf - s_comp, s_held - s_minhf, frag, cached_free)
            if after_events:  # logged and streamed at its end, after the events within it
                pending = (t_end - t, row, produced, finished)
            else:
                doubles += (t_end, t_end - t, 0.0)  # the step's duration as the clock saw it (not d)
                counts += row
                if one_cpu and not produced and finished is None:  # FrontEnd._run on its one CPU, inlined
                    fe.busy_s += token_s * n
                    at = fe.free_at = (fe.free_at if fe.free_at > t_end else t_end) + token_s * n
                else:
                    at = t_end if fe is None else stream(fe, t_end, token_s * (n + len(produced)), produced, finished)
                if k and not produced:  # ItlLog.tokens of n decodes that had a token in the step before
                    gaps.append(at - itl.last)
                    tallies.append(n)
                    itl.last = at
                else:
                    delivered(itl, at, k, b.reqs, n, produced)
            t = t_end
            k += 1
            idle = 0.0
            last_out = out
            if after_events or finished is not None:  # the clock catches up (rows stay: no one reads them meanwhile)
                if durations:
                    yield from advance_to(env, t, durations)
                    durations = []
                    num_waiting = len(sched.waiting)
                if after_events:
                    duration, row, produced, finished = pending
                    doubles += (t, duration, 0.0)
                    counts += (*row[:4], num_waiting, *row[5:])
                    delivered(itl, t if fe is None else stream(fe, t, token_s * (n + len(produced)), produced, finished), k - 1, b.reqs, n, produced)
                if finished is not None:
                    core.last_end_s = t
                    core.after_stretch_finish(t)  # (a decode pool serves waiting hand-offs)
                    sim._after_finishing(finished)
                    if sim.progress is not None:
                        sim.progress(env.now, len(sched.finished) + len(sched.rejected), len(sim.requests))
                    if not goes_on:
                        break
                t_next = next_input() if stepwise else env.peek()
            elif straddling:
                t_next = next_input()  # (stepwise) the bound may have moved meanwhile
            if k - k_flushed >= ROWS_PER_FLUSH:
                itl.flush()
                core.steps.append_rows(doubles, counts)
                doubles, counts, k_flushed = [], [], k
            if out is not None and partial:
                break
            if b.n != n:
                n = b.n
                if n == 0:
                    break
                fast = self._decode_fn(n)
        if k == 0:
            return 0
        core.steps.append_rows(doubles, counts)
        b.write_back(k, itl.last)
        if sched.finish_lag:  # the last step's batch, as ``schedule`` leaves it (its decodes in flight)
            sched.prev_scheduled = [(r, 1) for r, alive in zip(b.reqs, b.alive) if alive] + (
                last_out.scheduled if last_out is not None else [])
        if durations:
            yield from advance_to(env, t, durations)
        core.last_end_s = t
        core.idle_before_s = idle0 if k == 1 else 0.0  # as EngineStep.begin sets it for the last step
        return k

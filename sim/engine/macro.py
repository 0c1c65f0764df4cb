"""Macro-steps: many decode steps at once, with exactly the results of stepping one by one.

Between events, a batch of decodes evolves predictably: every running request computes one
token a step, nothing arrives, nothing finishes, nobody waits. :class:`DecodeRun` finds such
a stretch at a step boundary and advances it in one go, doing per step only what changes:

* the step's time, from the cost model on the step's shape (``num_seqs`` decodes over
  ``sum(computed + 1)`` KV tokens, which grows by the batch size each step), added to the
  clock by the same float additions the step-by-step loop makes;
* the allocator calls the scheduler would make: a request whose next token does not fit
  its ``slot_room`` calls ``allocate_slots`` at exactly the step and in exactly the order it
  would have (requests are bucketed by the step of their next crossing), so blocks are
  taken, hashed and evicted in the same sequence;
* the step log's row, from running sums of held, computed and final tokens updated at
  those crossings (the same integers ``StepLog.record`` sums over every request);
* the front end's streaming work (one token per request per step).

A stretch may start only when the scheduler is continuous (chunked or not), the
allocator paged without a token budget, every running request is decoding, nothing waits
or is swapped, the batch fits the token budget, and no step hook or checking step log
watches. It ends before the first step in which a request would finish, before a step
whose crossings could exhaust the free blocks (an allocation there might preempt), and
before the next SimPy event (an arrival, a follow-up turn, a request leaving the front
end): every step of the stretch ends strictly before it. Requests' counters are written
back at the end. ``tests/sim/engine/test_macro_steps.py`` runs every shipped scenario both
ways and requires identical outputs.
"""

from __future__ import annotations

import math

from sim.cost.shape import BatchShape
from sim.engine.metrics import StepLog
from sim.kv.paged import PagedAllocator
from sim.sched.continuous import ContinuousScheduler

#: Shortest stretch worth the set-up (a shorter one runs step by step).
MIN_STEPS = 3


class DecodeRun:
    """Advances stretches of pure decode steps for one :class:`~sim.engine.simulation.Simulation`."""

    def __init__(self, sim) -> None:
        self.sim = sim
        sched, alloc = sim.scheduler, sim.allocator
        self.enabled = (type(sched) is ContinuousScheduler and type(alloc) is PagedAllocator
                        and not alloc._bounded and sim.core.hook is None
                        and type(sim.core.steps) is StepLog)

    def _eligible(self) -> bool:
        sched = self.sim.scheduler
        running = sched.running
        if not running or sched.waiting or sched.swapped or len(running) > sched.max_num_batched_tokens:
            return False
        for r in running:
            if not (r.num_generated > 0 and r.num_computed_tokens == r.num_prompt_tokens + r.num_generated - 1):
                return False
        return True

    def run(self):
        """A SimPy sub-process: advance a stretch of decode steps if one starts now; returns
        how many steps it advanced (0: none, the caller steps normally)."""
        if not self.enabled or not self._eligible():
            return 0
        sim = self.sim
        env, core, sched, alloc = sim.env, sim.core, sim.scheduler, sim.allocator
        running = list(sched.running)
        n = len(running)
        left = min(r.num_output_tokens - r.num_generated for r in running)
        max_steps = left - 1  # the step in which the first request finishes runs normally
        if max_steps < MIN_STEPS:
            return 0
        t_next = env.peek()
        now = env.now
        B = alloc.block_size
        pool = alloc.pool
        cost = sim.cost
        tables = alloc.block_tables  # held_slots(r), inlined: len(table) x block_size
        c0 = [r.num_computed_tokens for r in running]
        g0 = [r.num_generated for r in running]
        # step -> indices (into ``running``) of the requests that call allocate_slots then
        buckets: dict[int, list[int]] = {}
        s_held = s_minhf = s_comp = 0
        finals = [r.num_prompt_tokens + r.num_output_tokens for r in running]
        helds = [0] * n
        for i, r in enumerate(running):
            buckets.setdefault(max(0, r.slot_room - c0[i]), []).append(i)
            h = helds[i] = len(tables.get(r.request_id, ())) * B
            f = finals[i]
            s_held += h
            s_minhf += h if h < f else f
            s_comp += c0[i]
        kv = s_comp + n  # decode_kv_tokens of the first step: sum(computed + 1)
        idle = idle0 = math.inf if core.last_end_s is None else now - core.last_end_s
        step_time = cost.step_time_s
        row = core.steps.append
        fe = sim.frontend
        token_work = fe.token_s * n if fe is not None else 0.0
        t = now
        done = 0
        durations: list[float] = []
        while done < max_steps:
            crossing = buckets.pop(done, None)
            if crossing is not None:
                if len(crossing) > pool.num_free:
                    buckets[done] = crossing
                    break  # an allocation might fail and preempt: the normal path decides
            d = step_time(BatchShape(n, 0, n, kv, 0.0, 0, 0), idle)
            durations.append(d)
            t_end = t + d
            if not t_end < t_next:
                durations.pop()
                if crossing is not None:
                    buckets[done] = crossing
                break
            if crossing is not None:
                crossing.sort()
                for i in crossing:
                    r = running[i]
                    r.num_computed_tokens = c0[i] + done
                    r.num_generated = g0[i] + done
                    alloc.allocate_slots(r, 1)  # cannot fail: enough free blocks (checked)
                    h_old, f = helds[i], finals[i]
                    h = helds[i] = len(tables[r.request_id]) * B
                    s_held += h - h_old
                    s_minhf += (h if h < f else f) - (h_old if h_old < f else f)
                    buckets.setdefault(done + max(1, r.slot_room - r.num_computed_tokens), []).append(i)
            s_comp += n  # the step's update: every request computed one token
            allocated = alloc.num_allocated_slots()
            empty = s_held - s_comp
            row(t_end, t_end - t, n, 0, n, 0, 0, n, 0, 0, 0, allocated - empty, allocated,
                s_minhf - s_comp, s_held - s_minhf, alloc.num_external_fragmentation_slots(),
                alloc.num_cached_free_slots())
            if fe is not None:
                fe._run(t_end, token_work)
            kv += n
            idle = 0.0
            t = t_end
            done += 1
        if done == 0:
            return 0
        for i, r in enumerate(running):
            r.num_computed_tokens = c0[i] + done
            r.num_generated = g0[i] + done
        yield from _advance_to(env, t, durations)
        core.last_end_s = t
        core.idle_before_s = idle0 if done == 1 else 0.0  # as EngineStep.begin sets it for the last step
        return done


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

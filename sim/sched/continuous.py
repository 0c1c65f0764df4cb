"""Continuous (iteration-level) batching, with or without chunked prefill.

vLLM v1's rules, over one token budget (``max_num_batched_tokens``) per step:

1. Running requests first, in priority order. Each gets its remaining tokens (one for
   a decode; a chunk of the prompt for a partial prefill), capped by the budget. If the
   allocator cannot make room, a victim among the running requests not yet scheduled
   this step is preempted (``victim.py``: the most recently admitted by default), and
   the allocation retried; if the victim is the request itself, the pass ends.
2. Then swapped requests come back, if nothing was preempted this step.
3. Then waiting requests are admitted FCFS, if nothing was preempted this step, while
   ``max_num_seqs`` and the budget allow.

``chunked=False`` (``continuous``): a prompt is prefilled whole in one step, so a waiting
request whose prompt exceeds the remaining budget waits for the next step.
``chunked=True`` (``chunked-prefill``): prompts are split to fill the budget, and running
decodes are served before running prefill chunks (decodes first, as Sarathi-Serve and
vLLM's chunked prefill do), so long prompts do not stall token generation.
"""

from __future__ import annotations

from sim.request import Request
from sim.sched.base import SchedulerBase
from sim.sched.output import SchedulerOutput, is_decode


class ContinuousScheduler(SchedulerBase):
    def __init__(self, allocator, preemptor, *, chunked: bool, **limits) -> None:
        super().__init__(allocator, preemptor, **limits)
        self.chunked = chunked

    def _priority_order(self) -> list[Request]:
        if not self.chunked:
            return list(self.running)
        decodes = [r for r in self.running if is_decode(r, 1)]
        if len(decodes) == len(self.running):
            return decodes
        return decodes + [r for r in self.running if not is_decode(r, 1)]

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        order = self._priority_order()
        alloc = self.allocator
        i = 0
        while i < len(order) and budget > 0:
            req = order[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            while not alloc.allocate_slots(req, n):
                victim = self._pop_victim(order, i)  # not yet scheduled (maybe req itself)
                self._preempt(victim, out)
                if victim is req:
                    break
            else:
                out.add(req, n)
                budget -= n
                i += 1
                continue
            break  # req itself was preempted
        return budget

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(budget=self.allocator.budget)
        budget = self._schedule_running(out, self.max_num_batched_tokens)
        if not out.preempted:
            budget = self._swap_in(out, budget)
            self._admit_waiting(out, budget, self.chunked)
        return out

"""Static batching: a batch forms, and runs until its last member finishes.

The pre-Orca way (a plain ``generate()`` loop): when the engine is idle, up to
``max_num_seqs`` waiting requests are admitted together (FCFS, while their KV fits and
their prompts, padded to the longest, fit ``max_num_batched_tokens``) and prefilled in
one step. Then every step decodes the whole batch. A member that finishes early still
occupies its row (decoded as padding) and its KV until the batch ends, and its answer is
returned then: ``finish_s`` is the batch's end, ``last_token_s`` when its last token was
generated. New requests wait for the next batch.
"""

from __future__ import annotations

from sim.request import Request
from sim.sched.base import SchedulerBase
from sim.sched.output import SchedulerOutput


class StaticScheduler(SchedulerBase):
    def __init__(self, allocator, preemptor, **limits) -> None:
        super().__init__(allocator, preemptor, **limits)
        self.done_in_batch: list[Request] = []  # finished members kept as padding

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(budget=self.allocator.budget)
        if self.running:
            self._decode_batch(out)
        else:
            budget = self._swap_in(out, self.max_num_batched_tokens)
            self._admit_batch(out, budget)
        return out

    def _decode_batch(self, out: SchedulerOutput) -> None:
        order = list(self.running)
        # ``order`` shrinks as victims leave it, at or after index ``i`` (paged KV can run
        # out mid-batch): the for loop walks it as ``while i < len(order)`` would.
        for i, req in enumerate(order):
            computed = req.num_computed_tokens
            n = req.num_tokens - computed
            if computed + n > req.slot_room and not self._make_room(order, i, req, n, out):
                break  # req itself was preempted
            out.add(req, n)
        for req in self.done_in_batch:
            out.add_padding(req.num_tokens)

    def _admit_batch(self, out: SchedulerOutput, budget: int) -> None:
        alloc = self.allocator
        longest = max((n for _, n in out.scheduled), default=0)
        reserved = self.reserved_growth() if self.reserve_full_length and self.waiting else 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            n = req.num_tokens - req.num_computed_tokens
            if max(longest, n) * (len(out.scheduled) + 1) > budget:
                break
            keep_free, future = self._admission_keep_free(req, req.num_computed_tokens + n, reserved)
            if not alloc.allocate_slots(req, n, keep_free_slots=keep_free):
                if not self.reject_when_full:
                    break
                self.waiting.popleft()
                self._reject(req, "kv_cache_full")
                out.rejected.append(req)
                continue
            self.waiting.popleft()
            self._mark_admitted(req)
            out.add(req, n)
            longest = max(longest, n)
            reserved += future
        out.prefill_padding_tokens = sum(longest - n for _, n in out.scheduled)

    def _finish(self, req: Request, now: float) -> None:
        self.running.remove(req)
        self.done_in_batch.append(req)

    def update_from_output(self, out: SchedulerOutput, now: float,
                           step_start_s: float | None = None) -> list[Request]:
        done = super().update_from_output(out, now, step_start_s)
        if not self.running and self.done_in_batch:  # the batch is over: answers go out
            for member in self.done_in_batch:
                self._complete(member, now)
            done = self.done_in_batch
            self.done_in_batch = []
            return done
        return []

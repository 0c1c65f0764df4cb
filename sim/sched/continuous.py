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
``prefill_first`` (vLLM V0's default scheduler, unchunked only): when waiting prompts can
be admitted, the step runs those prefills alone and the running decodes wait a step
(prefill-only steps stall token generation; the engine profile ``vllm-v0`` sets it).

``scheduler_steps`` = N > 1 (vLLM V0's ``--num-scheduler-steps``, multi-step scheduling): a
scheduling round whose step is all decodes runs N decode steps; in its N - 1 further steps
the running requests go on and nothing is admitted or swapped in, so a request that arrives
meanwhile waits for the round's end (a prefill step is a round of one step).

``chunked=True`` (``chunked-prefill``): prompts are split to fill the budget, and running
decodes are served before running prefill chunks (decodes first, as Sarathi-Serve and
vLLM's chunked prefill do), so long prompts do not stall token generation. With
``prefill_first`` as well (SGLang's default, ``enable_mixed_chunk`` off): a step with a prompt
chunk to run is a prefill-only step (the request being chunked first, then waiting ones FCFS,
up to the budget) and the running decodes wait; a decode step admits nothing.
"""

from __future__ import annotations

from sim.request import Request, RequestStatus
from sim.sched.base import SchedulerBase
from sim.sched.output import SchedulerOutput


class ContinuousScheduler(SchedulerBase):
    def __init__(self, allocator, preemptor, *, chunked: bool, **limits) -> None:
        super().__init__(allocator, preemptor, **limits)
        self.chunked = chunked

    def _priority_order(self) -> list[Request]:
        """A fresh list (victims are removed from it): running requests, decodes first if
        chunked and ``decodes_first``."""
        if not self.chunked or not self.decodes_first:
            return list(self.running)
        decodes, others = [], []
        for r in self.running:  # is_decode(r, 1), inlined: this runs for every request every step
            if r.num_generated > 0 and r.num_computed_tokens == r.num_prompt_tokens + r.num_generated - 1:
                decodes.append(r)
            else:
                others.append(r)
        return decodes + others if others else decodes

    def _schedule_running(self, out: SchedulerOutput, budget: int, chunk_cap: int = 0) -> int:
        order = self._priority_order()
        lagging = self.lagging  # finished, still seated (finish_lag): not scheduled
        scheduled = out.scheduled
        cap = out.budget.max_tokens  # None: unbounded
        # Decodes are summed here and added to ``out`` at the end: the same integers
        # ``out.add`` would add, in any order (the float ``prefill_attn_pairs`` still goes
        # through ``out.add`` in scheduling order).
        num_decodes = decode_kv = 0
        # ``order`` shrinks as victims leave it, always at or after index ``i``: the for
        # loop walks it exactly as ``while i < len(order)`` would.
        for i, req in enumerate(order):
            if budget <= 0:
                break
            if lagging and req.status is RequestStatus.FINISHED:
                continue
            computed = req.num_computed_tokens
            left = req.num_prompt_tokens + req.num_generated - computed  # req.num_tokens - computed
            n = left if left < budget else budget
            if 0 < chunk_cap < n:  # long_prefill_token_threshold
                n = chunk_cap
            # Within ``slot_room`` allocate_slots would succeed and change nothing: skip it.
            if computed + n > req.slot_room and not self._make_room(order, i, req, n, out):
                break  # req itself was preempted
            if left == 1 and req.num_generated > 0:  # is_decode(req, n): n is 1 too
                scheduled.append((req, 1))
                num_decodes += 1
                decode_kv += computed + 1 if cap is None or computed < cap else cap
            else:
                out.add(req, n)
            budget -= n
        out.num_decode_tokens += num_decodes
        out.decode_kv_tokens += decode_kv
        return budget

    def _prefill_only_step(self, out: SchedulerOutput) -> bool:
        """Chunked prefill-first (module docstring): the running requests' prompt chunks, then waiting
        prompts FCFS, within one budget; True when a chunk was scheduled (the step is prefill-only).
        A request that cannot get room preempts the running ones not scheduled (decodes included)."""
        def left(r: Request) -> int:  # tokens still to compute
            return r.num_prompt_tokens + r.num_generated - r.num_computed_tokens

        def chunk(r: Request) -> bool:  # a prompt chunk to run (not a decode, nor a finished request)
            n = left(r)
            return n > 1 or (n == 1 and r.num_generated == 0)

        order = sorted(self.running, key=lambda r: not chunk(r))  # prompt chunks first, in admission order
        budget = self.max_num_batched_tokens
        i = 0
        while i < len(order) and budget > 0 and chunk(order[i]):
            req = order[i]
            n = min(left(req), budget)
            if req.num_computed_tokens + n > req.slot_room and not self._make_room(order, i, req, n, out):
                break  # req itself was preempted
            out.add(req, n)
            budget -= n
            i += 1
        if self.waiting and budget > 0 and not out.preempted:
            self._admit_waiting(out, budget, True)
        return bool(out.scheduled)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(budget=self.allocator.budget)
        in_round = self.block_left > 0 and self.running  # multi-step: the round's further steps
        if in_round:
            self.block_left -= 1
        else:
            self.block_left = 0  # (a round whose requests all finished ends with them)
        if not in_round and self.prefill_first and not self.swapped and not self.chunked and self.waiting:
            self._admit_waiting(out, self.max_num_batched_tokens, False)
            if out.scheduled:
                return out  # a prefill-only step
        prefills = not in_round and self.prefill_first and self.chunked and not self.swapped
        if not (prefills and self._prefill_only_step(out)):  # (a chunked prefill-first step ran prompts only)
            chunk_cap = self._prefill_cap() if self.long_prefill_token_threshold else 0
            budget = self._schedule_running(out, self.max_num_batched_tokens, chunk_cap)
            if not out.preempted and not in_round:
                if self.swapped:  # (both phases do nothing on an empty queue)
                    budget = self._swap_in(out, budget)
                if self.waiting and not prefills:  # (chunked prefill-first: its decode steps admit nothing)
                    self._admit_waiting(out, budget, self.chunked, chunk_cap)
        if self.scheduler_steps > 1 and not in_round:  # a round begins: all decodes, N steps
            all_decodes = out.scheduled and out.num_decode_tokens == len(out.scheduled)
            self.block_left = self.scheduler_steps - 1 if all_decodes else 0
        if self.lagging:
            out.num_released = len(self.lagging)
            self.release_lagging()
        if self.finish_lag:
            self.prev_scheduled = out.scheduled
        return out

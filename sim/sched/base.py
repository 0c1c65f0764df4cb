"""State and bookkeeping every batching policy shares.

A scheduler is a plain object (no SimPy, no clock of its own): the engine calls
``add_request`` when a request arrives, ``schedule`` to get the next step's batch, and
``update_from_output(out, now)`` when the step is done. Policies differ only in
``schedule``. Queues: ``waiting`` (FCFS, preempted requests at the front), ``running``
(in admission order, so the last is the lowest priority), ``swapped`` (FIFO).

Every request that ``add_request`` accepts ends in exactly one of ``finished`` or
``rejected``, or is still in a queue: nothing is dropped.
"""

from __future__ import annotations

from collections import deque

from sim.request import Request, RequestStatus
from sim.sched.output import SchedulerOutput
from sim.sched.preemption import Preemptor
from sim.sched.sglang_admit import ignore_eos_fits
from sim.sched.tier import TierLoads
from sim.sched.victim import RemainingOutputModel, VictimPolicy, pick_victim


class SchedulerBase(TierLoads):
    def __init__(self, allocator, preemptor: Preemptor, *, max_num_seqs: int,
                 max_num_batched_tokens: int, max_model_len: int, reject_when_full: bool,
                 victim_policy: VictimPolicy = VictimPolicy.LIFO,
                 remaining: RemainingOutputModel | None = None, watermark_slots: int = 0,
                 prefill_first: bool = False, reserve_full_length: bool = False,
                 decodes_first: bool = True, admit_full_sequence: bool = False,
                 finish_lag: bool = False, long_prefill_token_threshold: int = 0,
                 scheduler_steps: int = 1, ignore_eos_admission: bool = False) -> None:
        self.allocator = allocator
        self.preemptor = preemptor
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.reject_when_full = reject_when_full
        self.victim_policy = victim_policy
        self.remaining = remaining
        self.watermark_slots = watermark_slots  # kept free at admission (vLLM V0's watermark)
        self.prefill_first = prefill_first  # vLLM V0: admitted prompts run in prefill-only steps
        #: vLLM V0's multi-step scheduling: a round of decodes runs this many steps, admitting
        #: nothing until it ends (``block_left``: the steps of the current round still to run)
        self.scheduler_steps = scheduler_steps
        self.block_left = 0
        #: TensorRT-LLM's GUARANTEED_NO_EVICT: admit a request only while every running request's
        #: prompt + max_tokens still fits, so no running request is ever preempted for room
        self.reserve_full_length = reserve_full_length
        self.ignore_eos_admission = ignore_eos_admission  # SGLang 0.4's rule (sim/sched/sglang_admit.py)
        #: chunked prefill serves running decodes before running prefill chunks (False: in
        #: admission order, as vLLM V1 does)
        self.decodes_first = decodes_first
        #: admit a waiting request only if its whole sequence fits the free blocks (vLLM 0.33's
        #: scheduler_reserve_full_isl; a check at admission, nothing reserved)
        self.admit_full_sequence = admit_full_sequence and getattr(allocator, "block_based", False)
        #: async scheduling's lag: a request that finished keeps its seat and blocks through the
        #: next ``schedule`` (which ran before its last token was in); ``lagging`` holds them
        self.finish_lag = finish_lag
        self.lagging: list[Request] = []
        #: the previous step's ``scheduled`` (finish_lag: whose decodes are still in flight)
        self.prev_scheduled: list[tuple[Request, int]] = []
        #: a prompt chunk takes at most this many tokens while other requests are in the engine
        #: (vLLM's long_prefill_token_threshold; 0: no cap)
        self.long_prefill_token_threshold = long_prefill_token_threshold
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self.finished: list[Request] = []
        self.rejected: list[Request] = []
        self._admit_counter = 0
        self.sampled: list[Request] = []  # of the last update_from_output
        self._init_tier(allocator)  # a CPU tier behind the prefix cache (sim/sched/tier.py)

    # -- queues ---------------------------------------------------------------------------

    def add_request(self, req: Request) -> bool:
        """Queue ``req``, or reject it at once (returns False) if it can never run."""
        if req.num_prompt_tokens >= self.max_model_len:
            self._reject(req, "prompt_too_long")
            return False
        if not self.allocator.fits_alone(req.num_prompt_tokens + req.max_tokens, req):
            self._reject(req, "exceeds_kv_pool")
            return False
        req.status = RequestStatus.WAITING
        self.waiting.append(req)
        return True

    def _reject(self, req: Request, reason: str) -> None:
        req.block_hashes = []  # never admitted again: its hashes are not needed
        req.status = RequestStatus.REJECTED
        req.reject_reason = reason
        self.rejected.append(req)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def _prefill_cap(self) -> int:
        """This step's cap on a prompt chunk (0: none): ``long_prefill_token_threshold`` while
        more than one request is in the engine, counted as the step starts (vLLM's rule)."""
        cap = self.long_prefill_token_threshold
        if cap and len(self.running) + len(self.waiting) + len(self.swapped) > 1:
            return cap
        return 0

    # -- shared scheduling phases -----------------------------------------------------------

    def _pop_victim(self, order: list[Request], first: int) -> Request:
        """Remove and return the victim among ``order[first:]`` (not yet scheduled)."""
        candidates = order[first:]
        victim = pick_victim(self.victim_policy, candidates, self.allocator.held_slots, self.remaining)
        order.remove(victim)
        return victim

    def _make_room(self, order: list[Request], i: int, req: Request, n: int,
                   out: SchedulerOutput) -> bool:
        """Allocate ``n`` slots for ``req = order[i]``, preempting victims among the requests
        not yet scheduled (``order[i:]``) until it fits; False if ``req`` itself was preempted.

        Callers skip it while ``num_computed_tokens + n <= req.slot_room``: the allocation
        would succeed and change nothing (``Request.slot_room``)."""
        while not self.allocator.allocate_slots(req, n):
            victim = self._pop_victim(order, i)  # not yet scheduled (maybe req itself)
            self._preempt(victim, out)
            if victim is req:
                return False
        return True

    def _preempt(self, victim: Request, out: SchedulerOutput) -> None:
        self.running.remove(victim)
        if victim.status is RequestStatus.FINISHED:  # lagging (finish_lag): done, its output is in
            self.lagging.remove(victim)
            victim.num_preemptions += 1
            out.preempted.append(victim)
            self._release(victim)
            return
        hashed = None
        if self.finish_lag and getattr(self.allocator, "prefix_caching", False):
            hashed = self._in_flight_decode(victim)
        self.preemptor.preempt(victim, self.waiting, self.swapped, out, hashed)

    def _in_flight_decode(self, req: Request) -> int | None:
        """Under async scheduling's lag: if ``req`` decoded in the previous step, that step's
        output is still in flight in the engine modelled, and the block its token completed was
        never hashed: the tokens whose blocks stay cached (``num_computed_tokens - 1``); else None."""
        for r, n in self.prev_scheduled:
            if r is req:
                if n == 1 and req.num_computed_tokens - 1 >= req.num_prompt_tokens:
                    return req.num_computed_tokens - 1
                return None
        return None

    def _mark_admitted(self, req: Request) -> None:
        req.status = RequestStatus.RUNNING
        req.admit_seq = self._admit_counter
        self._admit_counter += 1
        self.running.append(req)

    def _swap_in(self, out: SchedulerOutput, budget: int) -> int:
        """Bring swapped requests back (FIFO) while they fit; returns the budget left."""
        while self.swapped and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.swapped[0]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            if not self.preemptor.swap_in(req, n, out):
                break
            self.swapped.popleft()
            self._mark_admitted(req)
            out.add(req, n)
            budget -= n
        return budget

    def _admit_waiting(self, out: SchedulerOutput, budget: int, chunked: bool, cap: int = 0) -> int:
        """Admit waiting requests in FCFS order while they fit; returns the budget left.

        Without ``chunked`` a prompt must fit the remaining token budget whole; the queue
        does not skip ahead (head-of-line blocking, as in vLLM). ``cap``: the step's
        ``_prefill_cap``.
        """
        alloc = self.allocator
        reserved = self.reserved_growth() if self.reserve_full_length and self.waiting else 0
        # reserve_full_length keeps this request's own growth to prompt + max_tokens free already
        # (_admission_keep_free), which covers its whole prompt: the full-prompt check would count
        # the prompt's remaining tokens twice and strand a request that fits the pool exactly
        full = self.admit_full_sequence and not self.reserve_full_length
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            cached = alloc.lookup_prefix(req) if req.num_computed_tokens == 0 else 0
            looked = None
            if self.tier is not None and req.num_computed_tokens == 0:
                looked = self._try_load(req, cached, out, reserved)
                if looked is True:
                    continue
                if looked is False:
                    break
            n = req.num_tokens - req.num_computed_tokens - cached
            if 0 < cap < n:
                n = cap
            if n > budget:
                if not chunked:
                    break
                n = budget
            if self.ignore_eos_admission and self.running and not ignore_eos_fits(
                    self.running, req, alloc.num_total_slots - alloc.num_allocated_slots()):
                break
            keep_free, future = self._admission_keep_free(req, req.num_computed_tokens + cached + n, reserved)
            if not alloc.allocate_slots(req, n, cached, keep_free_slots=keep_free,
                                        full_tokens=min(req.num_tokens, self.max_model_len) if full else 0):
                if self.loaded and self._drop_loads(req):  # loaded blocks in the way (sim/sched/tier.py)
                    continue
                if self.reject_when_full:
                    self.waiting.popleft()
                    self._reject(req, "kv_cache_full")
                    out.rejected.append(req)
                    continue
                break
            self.waiting.popleft()
            if looked is not None:
                self.tier.count_lookup(*looked)
            loaded = self.loaded.pop(req.request_id, 0) if self.loaded else 0  # its tier hits (sim/sched/tier.py)
            if req.admitted_s is None:
                req.num_cached_tokens = cached + loaded
            req.num_computed_tokens += cached
            self._mark_admitted(req)
            out.admitted.append((req, cached))
            out.add(req, n)
            budget -= n
            reserved += future
        return budget

    def _admission_keep_free(self, req: Request, tokens_after: int, reserved: int) -> tuple[int, int]:
        """(slots to leave free when admitting ``req`` with ``tokens_after`` tokens, the slots
        it may still take after that). The watermark protects running requests' growth; with
        none running it is waived, so a request that needs more than the rest of the pool
        still runs. Under ``reserve_full_length`` the running requests' growth (``reserved``)
        and this one's own are kept free as well."""
        keep_free = self.watermark_slots if self.running else 0
        if not self.reserve_full_length:
            return keep_free, 0
        future = self.allocator.growth_slots(req, tokens_after)
        return keep_free + reserved + future, future

    def reserved_growth(self) -> int:
        """Slots the running requests may still take before they finish (prompt + max_tokens
        less what each holds): what admission keeps free under ``reserve_full_length``."""
        growth = self.allocator.growth_slots
        return sum(growth(r) for r in self.running)

    # -- after the step ---------------------------------------------------------------------

    def update_from_output(self, out: SchedulerOutput, now: float,
                           step_start_s: float | None = None) -> list[Request]:
        """Advance every scheduled request by its tokens; return those that finished.

        ``now`` is when the step ended; ``step_start_s`` when it began (the first step's
        start is a request's ``admitted_s``; defaults to ``now``).
        """
        done = []
        sampled = self.sampled = []  # the requests that sampled a token (the front end streams it)
        start = now if step_start_s is None else step_start_s
        for req, n in out.scheduled:  # every running request, every step: no property calls
            if req.admitted_s is None:
                req.admitted_s = start
            computed = req.num_computed_tokens + n
            req.num_computed_tokens = computed
            generated = req.num_generated
            if computed == req.num_prompt_tokens + generated:  # caught up (num_tokens): sample one token
                generated += 1
                req.num_generated = generated
                sampled.append(req)
                if req.first_token_s is None:
                    req.first_token_s = now
                if generated >= req.num_output_tokens:
                    req.last_token_s = now
                    done.append(req)
        for req in done:
            self._finish(req, now)
        return done

    def _finish(self, req: Request, now: float) -> None:
        if self.finish_lag:  # done now; its seat and blocks go after the next ``schedule``
            req.status = RequestStatus.FINISHED
            req.finish_s = now
            self.finished.append(req)
            self.lagging.append(req)
            return
        self.running.remove(req)
        self._complete(req, now)

    def release_lagging(self) -> None:
        """The end of a ``schedule`` under ``finish_lag``: the requests that finished before
        it leave ``running`` and free their blocks (their output is in now)."""
        running = self.running
        for req in self.lagging:
            running.remove(req)
            self._release(req)
        self.lagging = []

    def _release(self, req: Request) -> None:
        self.allocator.free(req)
        # Its blocks are freed (cached ones keep their own hashes in the pool): drop the
        # request's chained block hashes, the bulk of a finished request's memory (~4 KB).
        req.block_hashes = []

    def _complete(self, req: Request, now: float) -> None:
        self._release(req)
        req.status = RequestStatus.FINISHED
        req.finish_s = now
        self.finished.append(req)

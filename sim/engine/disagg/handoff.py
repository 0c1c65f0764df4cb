"""Disaggregated prefill/decode: a prefill pool hands each request's KV to a decode pool.

A request arrives at a prefill replica (the cluster's router picks it), which runs the
prompt as a request of its own (the *prefill copy*: same id and prompt, ``max_tokens`` 1, as
vLLM's proxy sends with ``do_remote_decode``) and samples the first token there: TTFT is
stamped on the prefill side. The copy then leaves the prefill scheduler's running list but
keeps its blocks until its KV has crossed the link (vLLM's ``request_finished`` returns
``delay_free_blocks`` for such a request until the decode side has read it,
vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py; SGLang keeps it in the
prefill's in-flight queue until the sender reports success, sglang/srt/disaggregation/
prefill.py). The decode router (``least-kv`` or ``least-outstanding``) picks a decode
replica, which allocates blocks for the prompt first, waiting FCFS while it has too few
free ones (vLLM allocates before the NIXL read, ``update_state_after_alloc``, the request
waiting in ``WAITING_FOR_REMOTE_KVS``; SGLang's ``DecodePreallocQueue``). Blocks the decode
replica's prefix cache already holds are not moved (vLLM's ``get_num_new_matched_tokens``
counts only tokens beyond the locally computed ones). Once the KV has landed the prefill
copy completes (its blocks freed) and the request joins the decode replica's running batch
with its prompt computed and one token generated, and decodes the rest there.

The link: every replica has one NIC resource (a SimPy resource; a replica with tensor
parallelism has a NIC per GPU moving its shard alongside, sim/engine/disagg/pools.py). A
transfer holds the prefill replica's NIC, then the decode replica's (always in that order:
no deadlock), so a prefill replica sending to many decode replicas and a decode replica
receiving from many both serialize, as one RDMA transfer runs a NIC at line rate. A
resource per replica pair would let one prefill replica send to every decode replica at
full rate at once, which no NIC does.

* ``block``: after the prefill ends, ``latency + bytes / bandwidth``.
* ``layer``: layer k's KV may leave once the prompt's last step has computed layer k (the
  step's compute split evenly over the layers). The layers cross back to back, holding both
  NICs for ``latency + bytes / bandwidth`` as block-wise does, but starting as early as the
  layers allow, so the transfer overlaps that step and, when the link keeps up, only the
  last layer's share (plus the latency) is exposed after it. The whole prompt's KV is taken
  to come out of that step (for a chunked prompt, earlier chunks could have left earlier:
  this is pessimistic for them).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import simpy

from sim.engine.disagg.pools import TransferSizing
from sim.engine.step.engine_step import EngineStep, Step, StepEnd, WaitKind
from sim.request import Request


class HandoffStep(EngineStep):
    """A pool replica's engine step that tells the hand-off what each step did."""

    def __init__(self, core: EngineStep, on_begin, on_end, on_freed=None) -> None:
        super().__init__(core.scheduler, core.allocator, core.driver, core.steps, core.runner,
                         core.clock, core.hook)
        self._on_begin, self._on_end = on_begin, on_end
        self._on_freed = on_freed  # after a macro-step stretch's finishing step (decode pools)

    def begin(self) -> Step:
        step = super().begin()
        if step.ran and self._on_begin is not None:
            self._on_begin(step)
        return step

    def end(self, step: Step, end_s: float) -> StepEnd:
        after = super().end(step, end_s)
        if step.ran or step.out.num_released:  # (async lag: a step that ran nothing freed seats and blocks)
            self._on_end(step, end_s)
        return after

    def after_stretch_finish(self, end_s: float) -> None:
        # A decode pool's stretch frees blocks only at its finishing step (it ends there):
        # hand-offs waiting for blocks are served then, as ``end`` serves them after a step.
        if self._on_freed is not None:
            self._on_freed()


@dataclass(slots=True, eq=False)
class Handoff:
    """One request on its way from a prefill replica to a decode replica."""

    copy: Request  # the prefill side's request
    req: Request  # the client's request (the decode side's)
    prefill: object  # the prefill Replica
    ready_s: float = math.inf  # when the prompt's last step ended (the first token)
    compute_start_s: float = 0.0  # when that step's compute starts
    compute_s: float = 0.0  # its compute time
    decode: object = None  # the decode Replica
    blocks: int = 0  # blocks moved
    allocated: simpy.Event | None = None  # set when waiting for decode blocks
    prefilled: simpy.Event | None = None  # layer-wise: succeeds when the prompt's last step ends


@dataclass
class TransferStats:
    transfers: int = 0
    blocks: int = 0
    bytes: int = 0
    link_s: list[float] = field(default_factory=list)  # per transfer: holding both NICs
    handoff_s: list[float] = field(default_factory=list)  # per request: first token -> decode admission
    alloc_waits: int = 0  # requests that waited for decode blocks
    spans: list[tuple] = field(default_factory=list)  # (prefill index, decode index, start, end) per transfer


class Disaggregation:
    """The hand-off between the pools of a :class:`~sim.engine.cluster.simulation.ClusterSimulation`."""

    def __init__(self, env: simpy.Environment, prefill: list, decode: list, decode_router,
                 sizing: TransferSizing) -> None:
        self.env, self.prefill, self.decode, self.sizing = env, prefill, decode, sizing
        self.decode_router = decode_router
        self.stats = TransferStats()
        self.nic = {id(r): simpy.Resource(env, capacity=1) for r in prefill + decode}
        self.nic_busy_s = {id(r): 0.0 for r in prefill + decode}
        self.decode_of: dict[int, int] = {}  # request id -> decode replica index (global)
        self._copies: dict[int, Handoff] = {}  # id(prefill copy) -> its hand-off
        self._pending = {id(r): deque() for r in decode}  # hand-offs waiting for decode blocks
        for r in prefill:
            r.core = HandoffStep(r.core, self._prefill_begin if sizing.layer_wise else None, self._prefill_end)
            r.on_rejected = self._copy_rejected
        for r in decode:  # after each of its steps (requests finished, blocks freed): admissions waiting
            r.core = HandoffStep(r.core, None, lambda _step, _end_s, r=r: self._serve_pending(r),
                                 lambda r=r: self._serve_pending(r))

    # -- arrival --------------------------------------------------------------------------

    def arrive(self, req: Request, prefill) -> None:
        """``req`` arrived and was routed to ``prefill``: its prefill copy goes there."""
        # max_tokens 1; a true length of 2, so the scheduler keeps it after its first token
        # (not freeing its blocks): _prefill_end takes it out of the running batch instead.
        copy = Request(req.request_id, req.arrival_s, req.prompt_segments, 1, 2, session=req.session, turn=req.turn)
        copy.prefix_len = req.prefix_len
        self._copies[id(copy)] = Handoff(copy, req, prefill)
        reason = self._decode_refuses(req)
        if reason is None:
            prefill.accept(copy)
            return
        prefill.requests.append(copy)
        prefill.scheduler._reject(copy, reason)
        self._copy_rejected(copy)

    def _decode_refuses(self, req: Request) -> str | None:
        """Why no decode replica could ever hold ``req`` (None: one could)."""
        sched = self.decode[0].scheduler  # every decode replica is alike
        if req.num_prompt_tokens >= sched.max_model_len:
            return "prompt_too_long"
        if not sched.allocator.fits_alone(req.num_prompt_tokens + req.max_tokens, req):
            return "exceeds_decode_kv_pool"
        return None

    def _copy_rejected(self, copy: Request) -> None:
        h = self._copies.pop(id(copy))
        h.req.status, h.req.reject_reason = copy.status, copy.reject_reason

    # -- the prefill side ------------------------------------------------------------------

    def _last_prefills(self, step: Step):
        for req, n in step.out.scheduled:
            h = self._copies.get(id(req))
            if h is not None and req.num_computed_tokens + n >= req.num_prompt_tokens:
                yield h

    def _prefill_begin(self, step: Step) -> None:
        """Layer-wise: the hand-off starts with the step that ends the prompt."""
        compute = sum(w.seconds for w in step.waits if w.kind is WaitKind.COMPUTE)
        start = step.start_s + sum(w.seconds for w in step.waits if w.kind is not WaitKind.COMPUTE)
        for h in self._last_prefills(step):
            h.compute_start_s, h.compute_s = start, compute
            h.prefilled = self.env.event()
            self.env.process(self._handoff(h))

    def _prefill_end(self, step: Step, end_s: float) -> None:
        """Copies that sampled their first token leave the running list, keeping their blocks."""
        for req, _ in step.out.scheduled:
            h = self._copies.get(id(req))
            if h is None or req.num_generated == 0:
                continue
            h.prefill.scheduler.running.remove(req)
            h.ready_s = end_s
            if h.prefilled is not None:
                h.prefilled.succeed()  # layer-wise: its hand-off is under way
            else:
                self.env.process(self._handoff(h))

    # -- the decode side -------------------------------------------------------------------

    def _allocate(self, h: Handoff) -> bool:
        """Blocks for ``h``'s prompt on its decode replica (its prefix cache's hits shared)."""
        req, alloc = h.req, h.decode.allocator
        cached = alloc.lookup_prefix(req)
        sched = h.decode.scheduler
        keep = sched.watermark_slots if sched.running else 0
        if not alloc.allocate_slots(req, req.num_prompt_tokens - cached, cached, keep_free_slots=keep):
            return False
        B = self.sizing.block_size
        h.blocks = -(-alloc.kept_tokens(req.num_prompt_tokens) // B) - cached // B
        return True

    def _serve_pending(self, replica) -> None:
        queue = self._pending[id(replica)]
        while queue and self._allocate(queue[0]):
            queue.popleft().allocated.succeed()

    # -- the hand-off ----------------------------------------------------------------------

    def _handoff(self, h: Handoff):
        env, sizing = self.env, self.sizing
        index = self.decode_router.pick(h.req)
        h.decode = self.decode[index]
        self.decode_of[h.req.request_id] = h.decode.index
        h.decode.requests.append(h.req)
        queue = self._pending[id(h.decode)]
        if queue or not self._allocate(h):
            h.allocated = env.event()
            queue.append(h)
            self.stats.alloc_waits += 1
            yield h.allocated
        if sizing.layer_wise:  # the layers go back to back, none before it is computed
            earliest = self._layer_wise_start(h)
            if earliest > env.now:
                yield env.timeout(earliest - env.now)
        with self.nic[id(h.prefill)].request() as sent:
            yield sent
            with self.nic[id(h.decode)].request() as received:
                yield received
                start = env.now
                seconds = sizing.seconds(h.blocks)
                if seconds > 0:
                    yield env.timeout(seconds)
                for r in (h.prefill, h.decode):
                    self.nic_busy_s[id(r)] += env.now - start
        st = self.stats
        st.transfers += 1
        st.blocks += h.blocks
        st.bytes += h.blocks * sizing.bytes_per_block_decode
        st.link_s.append(env.now - start)
        st.spans.append((h.prefill.index, h.decode.index, start, env.now))
        if h.prefilled is not None and not h.prefilled.triggered:
            yield h.prefilled  # layer-wise: the last layer cannot land before its step ends
        st.handoff_s.append(env.now - h.ready_s)
        self._land(h)

    def _layer_wise_start(self, h: Handoff) -> float:
        """When a layer-wise transfer may take the NICs: layer k of L is computed at
        ``t0 + k T / L`` (the step's compute ``T`` split evenly) and sending a layer takes
        ``b``; sent back to back, every layer computed before it leaves, the last lands at
        ``max(t0 + T / L + L b, t0 + T + b)`` at the earliest: start ``L b`` before that."""
        sizing = self.sizing
        L = sizing.num_layers
        busy = h.blocks * sizing.bytes_per_block_gpu / sizing.bandwidth_bytes_per_s
        t0, T = h.compute_start_s, h.compute_s
        return max(t0 + T / L, t0 + T + busy / L - busy)

    def _land(self, h: Handoff) -> None:
        """The KV is on the decode replica: the prefill copy completes, the request decodes."""
        now, copy, req = self.env.now, h.copy, h.req
        del self._copies[id(copy)]
        copy.num_output_tokens = 1
        copy.last_token_s = copy.first_token_s
        h.prefill.scheduler._complete(copy, now)  # frees the prefill blocks
        h.prefill.wake()  # an idle prefill engine whose waiting prompts did not fit goes on
        req.admitted_s = copy.admitted_s
        req.first_token_s = copy.first_token_s
        req.client_first_s = copy.client_first_s if copy.client_first_s is not None else copy.first_token_s
        req.token_s = copy.token_s  # its second token's gap (ITL) spans the hand-off
        req.num_cached_tokens = copy.num_cached_tokens
        req.num_preemptions = copy.num_preemptions
        req.num_computed_tokens = req.num_prompt_tokens
        req.num_generated = 1
        sched = h.decode.scheduler
        if req.num_generated >= req.num_output_tokens:  # a one-token answer: done at the hand-off
            req.last_token_s = req.first_token_s
            sched.running.append(req)
            sched._finish(req, now)  # frees its decode blocks: no step of the replica will serve them
            follow = h.decode.driver.next_turn(req)
            if follow is not None:
                h.decode.env.process(h.decode._follow_up(*follow))
            self._serve_pending(h.decode)  # hand-offs waiting for blocks (the replica may be idle)
        else:
            sched._mark_admitted(req)
        h.decode.wake()

"""Admission through a CPU tier (sim/kv/offload.py, #43), the part of
:class:`sim.sched.base.SchedulerBase` that only runs when ``kv.offload`` is set.

A waiting request whose prefix continues in the tier past its GPU hits does what vLLM's
offloading connector does with an asynchronous load: its GPU blocks are allocated at once,
the request leaves ``waiting`` for ``loading`` (holding no seat and no token budget) while
the engine copies the blocks over the host link, other requests are scheduled meanwhile,
and when the copy is done it goes back to the front of ``waiting`` with those tokens
computed: its prefill is shorter by them.
"""

from __future__ import annotations

from sim.request import Request
from sim.sched.output import SchedulerOutput


class TierLoads:
    def _init_tier(self, allocator) -> None:
        self.tier = getattr(allocator, "tier", None)  # None: no tier (every method here idle)
        self.loading: dict[int, Request] = {}  # request_id -> request whose blocks are loading
        self.loaded: dict[int, int] = {}  # request_id -> tokens cached or loaded (until admitted)

    def _try_load(self, req: Request, cached: int, out: SchedulerOutput, reserved: int):
        """With a CPU tier: start loading the blocks after ``req``'s ``cached`` GPU hits that the
        tier holds (True: ``req`` left ``waiting`` for ``loading``; False: they do not fit now,
        or another request's load is bringing them: admission stops as for any request that
        does not fit); else (blocks looked up, 0) for the caller to count once ``req`` is admitted."""
        alloc = self.allocator
        looked, hits = alloc.lookup_tier(req, cached)
        if not hits:
            return looked, 0
        if alloc.hits_loading(req, cached, hits):
            return False  # another request is loading them: wait for it, then hit them on the GPU
        tokens = cached + hits * alloc.block_size
        keep_free, _ = self._admission_keep_free(req, tokens, reserved)
        if not alloc.begin_load(req, cached, hits, keep_free):
            return False
        self.tier.count_lookup(looked, hits)
        self.waiting.popleft()
        self.loading[req.request_id] = req
        self.loaded[req.request_id] = tokens  # its GPU hits and the loaded blocks
        out.tier_loads.append((req, hits))
        return True

    def finish_load(self, req: Request) -> None:
        """``req``'s tier blocks are on the GPU: it goes back to the front of ``waiting``, its
        prefill shortened by them."""
        del self.loading[req.request_id]
        req.num_computed_tokens = self.allocator.end_load(req)
        self.waiting.appendleft(req)

    def _drop_loads(self, head: Request) -> bool:
        """``head`` does not fit. With nothing running, the loaded requests waiting (``head``
        among them or not) may hold the very blocks it needs and nothing else would free
        them: each lets its blocks go, cached on the GPU (a later lookup finds them there),
        and starts over as a fresh request; True if any did (try again). A loaded ``head``
        about to be rejected lets its blocks go too (False: the rejection goes on)."""
        if not self.running:
            dropped = [r for r in self.waiting if r.request_id in self.loaded and r.request_id not in self.loading]
            for req in dropped:
                self._drop_load(req)
            return bool(dropped)
        if self.reject_when_full and head.request_id in self.loaded:
            self._drop_load(head)
        return False

    def _drop_load(self, req: Request) -> None:
        del self.loaded[req.request_id]
        self.allocator.free(req)
        req.num_computed_tokens = 0

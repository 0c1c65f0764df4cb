"""The router of a cluster: which replica gets a request (sim/engine/cluster/simulation.py).

* ``round-robin``: replicas in turn.
* ``least-outstanding``: the replica with the fewest requests in flight: waiting, running,
  swapped out, or still in its front end (routed there and neither finished nor rejected).
* ``least-kv``: the replica with the most free KV slots (evictable prefix-cache blocks
  count as free).
* ``prefix-aware``: the replica whose prefix cache holds the longest prefix of the prompt
  (ties: the least outstanding), unless its outstanding requests exceed
  ``prefix_load_factor`` times the mean over replicas, or no replica holds any of it: then
  least-outstanding (as SGLang's router and llm-d's prefix scorer do). The router reads
  each replica's cache directly (``lookup_prefix``, which claims nothing); a real router
  keeps an approximate copy of what it sent where.

Ties go to the first replica at or after a rotating start (the one after the last pick),
so an idle cluster spreads requests instead of piling them on replica 0.

With disaggregation (sim/engine/disagg/handoff.py) one router picks among the prefill pool (the
cluster's ``router``) and another among the decode pool (``decode_router``: ``least-kv`` or
``least-outstanding``); each sees only its pool's replicas.
"""

from __future__ import annotations

from sim.config.cluster_schema import ClusterConfig, RouterKind
from sim.request import Request


class Router:
    """Picks a replica index for each request. A replica offers ``outstanding()`` and
    ``allocator`` (sim/engine/cluster/simulation.py's :class:`Replica`)."""

    def __init__(self, cfg: ClusterConfig, replicas: list, kind: str | None = None) -> None:
        self.kind = RouterKind(cfg.router if kind is None else kind)  # ``kind``: a decode pool's router
        self.load_factor = cfg.prefix_load_factor
        self.replicas = replicas
        self._next = 0  # round-robin position, and where ties start
        self.num_prefix_routed = 0  # prefix-aware: requests sent to their best-matching replica
        self.num_fallbacks = 0  # prefix-aware: sent least-outstanding because that one was overloaded

    def pick(self, req: Request) -> int:
        kind, n = self.kind, len(self.replicas)
        if kind is RouterKind.ROUND_ROBIN:
            chosen = self._next
        elif kind is RouterKind.LEAST_KV:
            free = [r.allocator.num_total_slots - r.allocator.num_allocated_slots() for r in self.replicas]
            chosen = self._best(range(n), lambda i: -free[i])
        else:
            loads = [r.outstanding() for r in self.replicas]
            chosen = self._best(range(n), loads.__getitem__)
            if kind is RouterKind.PREFIX_AWARE:
                chosen = self._prefix_pick(req, loads, chosen)
        self._next = (chosen + 1) % n
        return chosen

    def turns_ahead(self, index: int) -> int | None:
        """Round-robin: how many picks come before replica ``index``'s next (0: the very
        next); None for the routers that read the replicas (any pick may be any replica)."""
        if self.kind is not RouterKind.ROUND_ROBIN:
            return None
        return (index - self._next) % len(self.replicas)

    def _prefix_pick(self, req: Request, loads: list[int], least: int) -> int:
        hits = [r.allocator.lookup_prefix(req) for r in self.replicas]
        longest = max(hits)
        if longest == 0:
            return least
        best = self._best((i for i, h in enumerate(hits) if h == longest), loads.__getitem__)
        if loads[best] > self.load_factor * sum(loads) / len(loads):
            self.num_fallbacks += 1
            return least
        self.num_prefix_routed += 1
        return best

    def _best(self, candidates, key) -> int:
        """The candidate with the smallest ``key``; ties: the first at or after ``_next``."""
        n, start = len(self.replicas), self._next
        return min(candidates, key=lambda i: (key(i), (i - start) % n))

"""The router of a cluster: which replica gets a request (sim/engine/cluster/simulation.py).

* ``round-robin``: replicas in turn.
* ``least-outstanding``: the replica with the fewest requests in flight: waiting, running,
  swapped out, or still in its front end (routed there and neither finished nor rejected).
* ``least-kv``: the replica with the most free KV slots (evictable prefix-cache blocks
  count as free).
* ``prefix-aware``: the replica whose prefix cache holds the longest prefix of the prompt
  (ties: the least outstanding), unless its outstanding requests exceed
  ``prefix_load_factor`` times the mean over replicas, or no replica holds any of it: then
  least-outstanding. It reads each replica's cache directly (``lookup_prefix``, which
  claims nothing), as llm-d's precise KV-cache-aware scorer knows it from the engines' KV
  events: a burst of same-prefix requests (nothing cached yet) is spread.
* ``cache-aware``: SGLang's router (``--policy cache_aware``). If the loads (outstanding
  requests) are imbalanced, ``max - min > balance_abs_threshold`` *and* ``max >
  min * balance_rel_threshold``, the least loaded replica; else the replica its tree of
  prompts already *sent* (sim/engine/cluster/prefix_tree.py) says holds the longest prefix,
  when that prefix is more than ``cache_threshold`` of the prompt, and otherwise the
  replica whose tree is smallest. Either way the prompt then goes into the tree under the
  chosen replica; every ``eviction_interval_s`` each replica's part of the tree is cut to
  ``max_tree_size`` tokens (least recently used leaves first). Same-prefix requests go
  together from the first one, before anything is cached.

Ties go to the first replica at or after a rotating start (the one after the last pick),
so an idle cluster spreads requests instead of piling them on replica 0.

With disaggregation (sim/engine/disagg/handoff.py) one router picks among the prefill pool (the
cluster's ``router``) and another among the decode pool (``decode_router``: ``least-kv`` or
``least-outstanding``); each sees only its pool's replicas.
"""

from __future__ import annotations

import math

from sim.config.cluster_schema import ClusterConfig, RouterKind
from sim.engine.cluster.prefix_tree import PrefixTree, prompt_runs
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
        self.cfg = cfg
        self.tree = PrefixTree(len(replicas)) if self.kind is RouterKind.CACHE_AWARE else None
        self.num_cache_routed = 0  # cache-aware: sent to the tree's best match (above cache_threshold)
        self.num_balanced = 0  # cache-aware: loads imbalanced, sent to the least loaded
        self.num_low_match = 0  # cache-aware: match at or below cache_threshold, sent to the smallest tree
        self.num_evictions = 0  # cache-aware: eviction passes that found a tree above max_tree_size
        self._next_evict_s = cfg.eviction_interval_s if cfg.eviction_interval_s > 0 else math.inf

    def pick(self, req: Request, now: float = 0.0) -> int:
        """The replica for ``req``, arriving at ``now`` (the cache-aware tree's eviction clock)."""
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
            elif kind is RouterKind.CACHE_AWARE:
                chosen = self._cache_aware_pick(req, loads, chosen, now)
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

    def _cache_aware_pick(self, req: Request, loads: list[int], least: int, now: float) -> int:
        cfg, tree = self.cfg, self.tree
        if now >= self._next_evict_s:  # SGLang's eviction thread wakes every interval; none ran since
            self.num_evictions += max(tree.sizes) > cfg.max_tree_size
            tree.evict(cfg.max_tree_size)
            interval = cfg.eviction_interval_s
            self._next_evict_s = (math.floor(now / interval) + 1) * interval
        runs = prompt_runs(req.prompt_segments)
        high, low = max(loads), min(loads)
        if high - low > cfg.balance_abs_threshold and high > low * cfg.balance_rel_threshold:
            self.num_balanced += 1
            chosen = least
        else:
            matched, worker = tree.match(runs)
            if req.num_prompt_tokens and matched / req.num_prompt_tokens > cfg.cache_threshold:
                self.num_cache_routed += 1
                chosen = worker
            else:
                self.num_low_match += 1
                chosen = self._best(range(len(self.replicas)), tree.sizes.__getitem__)
        tree.insert(runs, chosen)
        return chosen

    def _best(self, candidates, key) -> int:
        """The candidate with the smallest ``key``; ties: the first at or after ``_next``."""
        n, start = len(self.replicas), self._next
        return min(candidates, key=lambda i: (key(i), (i - start) % n))


def cache_aware_line(c: dict) -> str:
    """summary.json's ``cluster.cache_aware`` in words (the report's and the table's)."""
    return (f"cache-aware: {c['cache_routed']} sent to their tree match (> {c['cache_threshold']:g} of the prompt), "
            f"{c['low_match']} to the smallest tree (lower match), {c['balanced']} to the least loaded "
            f"(loads apart by > {c['balance_abs_threshold']} and > {c['balance_rel_threshold']:g}x)")

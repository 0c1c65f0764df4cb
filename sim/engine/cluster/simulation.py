"""Replicas of one engine behind a router, on one simulated clock.

A scenario with ``cluster.num_replicas: N > 1`` runs N copies of its engine: the same
model, GPU, tensor parallelism, profile and KV settings, each with its own scheduler,
allocator, swap space, PCIe link, front end and step log (a :class:`Replica` is a
:class:`~sim.engine.simulation.Simulation` assembled on the cluster's SimPy environment,
so every replica runs the very same engine loop). One
:class:`~sim.engine.parts.SessionDriver` makes every request (ids and conversation history
are global, in arrival order); the router (sim/engine/cluster/router.py) picks a replica, whose
front end or scheduler then gets it. With ``sticky_sessions`` the later turns of a
conversation go to the replica of its first turn.

With ``cluster.disaggregation`` the replicas form a prefill pool and a decode pool, each
assembled from its own overrides (sim/engine/disagg/pools.py): the router places each
request on a prefill replica and the hand-off (sim/engine/disagg/handoff.py) moves its KV to a
decode replica; summary.json gains ``cluster.disaggregation`` (sim/engine/disagg/summary.py)
and each replica's ``role``.

A replica (sim/engine/cluster/replica.py) runs its macro-steps (sim/engine/macro/run.py) off the clock
until it may next be read or fed: the router's next pick (known ahead when no session has a
follow-up turn: the next arrival, or under round-robin the next arrival whose turn it is)
or a request leaving its front end; the step such an event falls within runs on the clock
(its allocations and admissions at its start, its update at its end). With follow-up turns
every step runs on the clock. The replicas of a disaggregated cluster end each stretch before
the next event instead. ``macro_steps=False`` steps one by one; the results are exactly the
same either way (tests/sim/cluster/test_cluster_routing.py, test_disaggregation.py).

:func:`summarize_cluster` writes summary.json: today's keys over every request (latencies,
the cluster's throughput), KV, preemption and engine figures aggregated over replicas (the
``cluster.aggregation`` block says how), and one entry per replica under ``replicas``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import simpy

from sim.engine.cluster.tier_sums import cluster_tier_summary
from sim.config.scenario import Scenario
from sim.engine.logs.itl import merged
from sim.engine.logs.metrics import frontend_note, summarize
from sim.engine.disagg.handoff import Disaggregation
from sim.engine.disagg.pools import build_pools, with_sessions
from sim.engine.disagg.summary import disaggregation_summary, prefill_pool_hit_rate
from sim.engine.parts import SessionDriver, build_parts, replica_parts, without_vetoed_defaults
from sim.engine.cluster.router import Router
from sim.engine.cluster.replica import Replica
from sim.engine.simulation import SimResult
from sim.errors import ConfigError
from sim.gc_pause import fewer_collections
from sim.request import Request
from sim.workload.generate import SessionSpec


@dataclass
class ClusterResult:
    scenario: Scenario
    requests: list[Request]  # every request that arrived, in arrival order (global ids)
    replica_of: list[int]  # request id -> the replica it was routed to
    replicas: list[SimResult]  # per replica: its requests, step log, scheduler, allocator...
    router: Router
    sim_wall_s: float = 0.0
    end_s: float = 0.0
    extra: dict = field(default_factory=dict)
    roles: list = field(default_factory=list)  # per replica: None, or "prefill" / "decode"
    handoff: object = None  # disaggregation: the hand-off (sim/engine/disagg/handoff.py), its transfer figures

    def combined(self) -> SimResult:
        """Every request, with replica 0's engine: summarize() over it gives the request
        figures of the whole cluster (its engine figures are replaced by aggregates)."""
        return dataclasses.replace(self.replicas[0], requests=self.requests, end_s=self.end_s,
                                   sim_wall_s=self.sim_wall_s, extra={}, frontend=None,
                                   itl=merged(r.itl for r in self.replicas))


def refuse_pipeline_pools(sc: Scenario, pools: dict[str, Scenario]) -> None:
    """A pool override ``engine.pipeline_parallel_size`` > 1 (``pools``: role -> the pool's
    scenario): one error line (the hand-off drives one-stage engines;
    sim/engine/pipeline/cluster.py ``check_pipeline_cluster``). Also `sim plan`'s check."""
    for role, pool_sc in pools.items():
        pp = pool_sc.engine.pipeline_parallel_size
        if pp > 1:
            raise ConfigError(sc.source_path, f"cluster.disaggregation.{role}.engine.pipeline_parallel_size", (
                f"a disaggregated pool of pipeline-parallel engines ({pp} stages) is not modelled: the KV "
                "hand-off knows one-stage engines only; set it to 1 (tensor parallelism is modelled)"))


class ClusterSimulation:
    """One run of a scenario with ``cluster.num_replicas`` engines; ``run()`` returns a
    :class:`ClusterResult` (``summarize_cluster`` turns it into summary.json)."""

    #: The engine of each replica; replicas of a pipeline-parallel engine (vLLM V1's batch
    #: queue) are sim/engine/pipeline/cluster.py's BatchQueueReplica (#15).
    replica_class = Replica
    single_turns = False  # no session has a follow-up turn (set in __init__)
    next_route_s = -math.inf  # no earlier than the router's next pick (-inf: not known)
    _next_session = 0  # the session the arrival process submits next

    def __init__(self, sc: Scenario, progress=None, macro_steps: bool = True, planned: tuple | None = None) -> None:
        dis = sc.cluster.disaggregation
        if dis is None:  # (``planned``: build_plan(sc), made already; a disaggregated run plans per pool)
            first = build_parts(sc, planned)
            pools = [[first] + [replica_parts(first) for _ in range(sc.cluster.num_replicas - 1)]]
            self.sc = first.sc
        else:  # a prefill pool and a decode pool, each with its own engine settings
            prefill, decode, sizing = build_pools(sc)
            refuse_pipeline_pools(sc, {"prefill": prefill[0].sc, "decode": decode[0].sc})  # not modelled (#15)
            first = prefill[0]
            pools = [prefill, [with_sessions(p, first.sessions) for p in decode]]
            self.sc = without_vetoed_defaults(sc, first.model)
        sc = self.sc
        self.cal, self.plan, self.sessions = first.cal, first.plan, first.sessions
        self.env = simpy.Environment()
        self.driver = SessionDriver(sc, None)  # makes requests; the router places them
        self.requests = self.driver.requests
        self.macro_steps = macro_steps
        self.progress = progress
        # When the router next picks a replica: the arrival process's next session, known
        # ahead when no session has a follow-up turn (those come a think time after any
        # step); -inf when not known (replicas' macro-steps then step on the clock).
        self.single_turns = self.sessions.max_turns() <= 1
        roles = [None] if dis is None else ["prefill", "decode"]
        self.replicas = []
        for role, pool in zip(roles, pools):
            for parts in pool:
                self.replicas.append(self.replica_class(self, len(self.replicas), parts, role))
        routed = self.replicas if dis is None else self.replicas[:dis.prefill_replicas]
        self.router = Router(sc.cluster, routed)  # with disaggregation: over the prefill pool
        self.handoff = None if dis is None else Disaggregation(
            self.env, routed, self.replicas[dis.prefill_replicas:],
            Router(sc.cluster, self.replicas[dis.prefill_replicas:], kind=str(dis.decode_router)), sizing)
        self.sticky = sc.cluster.sticky_sessions
        self.replica_of: list[int] = []
        self._home: dict[int, int] = {}  # session id -> replica of its first turn (sticky)

    def replica_progress(self, now: float, _done: int, _arrived: int) -> None:
        if self.progress is not None:
            done = sum(len(r.scheduler.finished) + len(r.scheduler.rejected) for r in self.replicas)
            self.progress(now, done, len(self.requests))

    def submit(self, session: SessionSpec, turn: int) -> None:
        req = self.driver.make(session, turn, self.env.now)
        sid, last = session.session_id, turn == len(session.turns) - 1
        home = None
        if self.sticky and turn > 0:
            home = self._home.pop(sid, None) if last else self._home.get(sid)
        index = home if home is not None else self.router.pick(req, self.env.now)
        if self.sticky and turn == 0 and not last:
            self._home[sid] = index
        self.replica_of.append(index)
        if self.handoff is not None:
            self.handoff.arrive(req, self.replicas[index])  # its prefill copy goes there
        else:
            self.replicas[index].accept(req)

    def _arrivals(self):
        env = self.env
        known = self.single_turns
        for j, session in enumerate(self.sessions):
            if session.arrival_s > env.now:
                delay = session.arrival_s - env.now
                if known:
                    self.next_route_s, self._next_session = env.now + delay, j  # when the timeout fires
                yield env.timeout(delay)
            self.submit(session, 0)
        if known:
            self.next_route_s, self._next_session = math.inf, len(self.sessions)

    def next_pick_s(self, index: int) -> float:
        """No earlier than the router's next pick of replica ``index``: the next arrival's
        time; under round-robin (its turn known ahead) the arrival of the session whose turn
        it is, a hair early (that session's timeout is not scheduled yet). -inf when follow-up
        turns may come."""
        ahead = self.router.turns_ahead(index)
        if not ahead or not self.single_turns or self.handoff is not None:
            return self.next_route_s  # (sticky sessions matter only to follow-up turns)
        j = self._next_session + ahead
        if j >= len(self.sessions):
            return math.inf
        t = self.sessions.arrival_s(j)
        return t - max(1e-9, abs(t) * 1e-12)

    def run(self) -> ClusterResult:
        t0 = time.perf_counter()
        self.env.process(self._arrivals())
        for replica in self.replicas:
            replica.progress = self.replica_progress if self.progress is not None else None
            self.env.process(replica._engine())
        with fewer_collections():
            self.env.run()
        end = max([self.env.now] + [r.done_s() for r in self.replicas])  # incl. front ends' backlogs
        return ClusterResult(self.sc, self.requests, self.replica_of, [r.result(end) for r in self.replicas],
                             self.router, sim_wall_s=time.perf_counter() - t0, end_s=end,
                             roles=[r.role for r in self.replicas], handoff=self.handoff)


#: How summary.json's engine figures of a cluster combine the replicas' (its ``cluster.aggregation``).
_SUMS = ("pool_tokens", "pool_bytes", "num_gpu_blocks", "prefix_cache_hit_tokens", "prefill_tokens_saved",
         "prefix_cache_evictions", "tokens_evicted")
_PEAKS = ("peak_used_fraction", "peak_token_fraction")
AGGREGATION = {
    "sums": [f"kv.{k}" for k in _SUMS] + ["preemptions.* (counters)", "engine.num_steps", "engine.busy_s",
                                           "engine.gpus"],
    "largest_replica": [f"kv.{k}" for k in _PEAKS] + [
        "preemptions.swap_peak_bytes", "engine.peak_running", "engine.peak_waiting"],
    "mean_over_replicas": ["kv.mean_* fractions"],
    "over_all_requests": ["requests", "ttft_s", "tpot_s", "itl_s", "e2e_s", "throughput", "goodput_requests_per_s",
                          "slo", "kv.prefix_cache_hit_rate"],
}


def summarize_cluster(result: ClusterResult) -> dict:
    """summary.json of a cluster run (module docstring)."""
    per = [summarize(r) for r in result.replicas]
    out = summarize(result.combined())
    kv = out["kv"]
    for key in _SUMS:
        kv[key] = sum(s["kv"][key] for s in per)
    for key in _PEAKS:
        kv[key] = max(s["kv"][key] for s in per)
    for key in kv:
        if key.startswith("mean_"):
            kv[key] = sum(s["kv"][key] for s in per) / len(per)
    tiers = cluster_tier_summary(per)  # each replica's own CPU tier, summed (sim/engine/cluster/tier_sums.py)
    if tiers is not None:
        out["kv_offload"] = tiers
    stats = [r.allocator.prefix_cache_stats() for r in result.replicas]
    queried = sum(s.queried_tokens for s in stats)
    kv["prefix_cache_hit_rate"] = kv["prefix_cache_hit_tokens"] / queried if stats[0].enabled and queried else None
    pre = out["preemptions"]
    for key, value in pre.items():
        if key == "swap_peak_bytes":
            pre[key] = max(s["preemptions"][key] for s in per)
        elif key == "by_cause":
            pre[key] = {c: sum(s["preemptions"][key][c] for s in per) for c in value}
        else:
            pre[key] = sum(s["preemptions"][key] for s in per)
    eng = out["engine"]
    eng["num_steps"] = sum(s["engine"]["num_steps"] for s in per)
    eng["busy_s"] = sum(s["engine"]["busy_s"] for s in per)
    eng["gpus"] = sum(s["engine"]["gpus"] for s in per)  # each replica's tp x pp (a pool's own tp)
    for key in ("peak_running", "peak_waiting"):
        eng[key] = max(s["engine"][key] for s in per)
    shares = [s["engine"]["frontend_busy_share"] for s in per if s["engine"]["frontend_busy_share"] is not None]
    eng["frontend_busy_share"] = max(shares) if shares else None  # the busiest replica's front end
    out["notes"] += frontend_note(eng["frontend_busy_share"])
    cfg, router = result.scenario.cluster, result.router
    out["cluster"] = {"num_replicas": cfg.num_replicas, "router": str(cfg.router),
                      "sticky_sessions": cfg.sticky_sessions, "prefix_load_factor": cfg.prefix_load_factor,
                      "prefix_routed": router.num_prefix_routed, "prefix_fallbacks": router.num_fallbacks,
                      "aggregation": AGGREGATION}
    if str(cfg.router) == "cache-aware":  # SGLang's router: its settings and where its picks went
        out["cluster"]["cache_aware"] = {
            "cache_threshold": cfg.cache_threshold, "balance_abs_threshold": cfg.balance_abs_threshold,
            "balance_rel_threshold": cfg.balance_rel_threshold, "eviction_interval_s": cfg.eviction_interval_s,
            "max_tree_size": cfg.max_tree_size, "cache_routed": router.num_cache_routed,
            "balanced": router.num_balanced, "low_match": router.num_low_match,
            "eviction_passes": router.num_evictions, "tree_tokens": list(router.tree.sizes)}
    if result.handoff is not None:  # disaggregated prefill/decode (sim/engine/disagg/summary.py)
        kv["prefix_cache_hit_rate"] = prefill_pool_hit_rate(result)
        out["cluster"]["disaggregation"] = disaggregation_summary(result, per)
    if str(cfg.router) == "prefix-aware" and not result.scenario.kv.prefix_caching:
        out["notes"].append("cluster.router prefix-aware without kv.prefix_caching: no replica caches "
                            "prefixes, so every request is routed least-outstanding")
    if str(cfg.router) == "cache-aware" and not result.scenario.kv.prefix_caching:
        out["notes"].append("cluster.router cache-aware without kv.prefix_caching: the router keeps a prefix's "
                            "requests together, but no replica caches prefixes, so no prefill is saved")
    out["replicas"] = [_replica_entry(i, s, result.end_s) for i, s in enumerate(per)]
    if result.handoff is not None:
        for entry, role, s in zip(out["replicas"], result.roles, per):
            entry["role"] = role
            entry["kv_pool_tokens"] = s["kv"]["pool_tokens"]
    wall = out.pop("sim_wall_s")
    out["sim_wall_s"] = wall  # last, as in a single engine's summary
    return out


#: The latency percentiles of each replica's entry in summary.json (the run's own: every one).
REPLICA_PERCENTILES = ("p50", "p95", "p99")


def _replica_entry(index: int, s: dict, end_s: float) -> dict:
    pre, eng = s["preemptions"], s["engine"]
    return {
        "replica": index,
        "requests": {k: s["requests"][k] for k in ("arrived", "completed", "rejected", "in_flight")},
        "peak_running": eng["peak_running"],
        "kv_peak_used_fraction": s["kv"]["peak_used_fraction"],
        "preemptions": pre["recompute"] + pre["swap"],
        "busy_share": eng["busy_s"] / end_s if end_s > 0 else 0.0,
        "prefix_cache_hit_rate": s["kv"]["prefix_cache_hit_rate"],
        "ttft_s": {q: s["ttft_s"][q] for q in REPLICA_PERCENTILES},
        "tpot_s": {q: s["tpot_s"][q] for q in REPLICA_PERCENTILES},
        "itl_s": {q: s["itl_s"][q] for q in REPLICA_PERCENTILES},
    }

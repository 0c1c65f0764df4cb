"""Replicas of a pipeline-parallel engine behind the cluster's router (issue #15).

A real deployment of a model too large for one node's worth of tensor parallelism (a 70B
model on tp x pp GPUs) serves it as several such copies behind a router. With
``cluster.num_replicas`` = N > 1 and ``engine.pipeline_parallel_size`` = pp > 1 in vLLM V1's
form (``engine.pipeline_mode: batch-queue``, sim/engine/pipeline/batch_queue.py) each of the
N replicas is a whole batch-queue engine: its own scheduler, one KV pool of all its blocks,
its own pp stages (SimPy resources, sim/engine/pipeline/stages.py) and its own batches in
flight, on tp x pp GPUs; N x tp x pp GPUs in all. The replicas are the cluster machinery's
(sim/engine/cluster/simulation.py): one SimPy environment, one SessionDriver, every router kind and
sticky sessions, requests.csv's ``replica`` column, per-replica summary entries.

:class:`BatchQueueReplica` is a cluster :class:`~sim.engine.cluster.simulation.Replica` (what the
router reads, how a request is accepted, follow-up turns through the router) whose engine
loop is the batch queue's (:class:`~sim.engine.pipeline.batch_queue.BatchQueueSimulation`:
``_engine``, ``_pump``, ...); :class:`PipelineCluster` is a ClusterSimulation building those.
``run()`` returns a ClusterResult whose replicas' results carry their own
``extra["pipeline"]`` (stage busy times, batches); sim/engine/pipeline/summary.py writes
the cluster summary plus a ``parallel`` block for the whole and for each replica.

Refused, one ``error:`` line each (:func:`check_pipeline_cluster`):

- replicas of vLLM V0's form (``virtual-engines``): there the engine itself is modelled as
  the cluster machinery (pp virtual engines are its replicas, under a least-outstanding
  router of their own), so N copies would need routers under the router; not modelled.
- disaggregated prefill/decode pools of pipeline-parallel engines: the hand-off drives a
  pool replica's single-stage engine step and sizes the KV it moves per GPU of a
  tensor-parallel replica; neither knows of stages.
"""

from __future__ import annotations

from sim.config.profile_schema import PipelineMode, pipeline_mode
from sim.config.scenario import Scenario
from sim.engine.cluster.simulation import ClusterResult, ClusterSimulation
from sim.engine.cluster.replica import Replica
from sim.engine.parts import EngineParts
from sim.engine.pipeline.batch_queue import BatchQueueSimulation
from sim.engine.simulation import SimResult
from sim.errors import ConfigError
from sim.model.parallel import PP_KEY


def check_pipeline_cluster(sc: Scenario) -> None:
    """Refuse the cluster shapes of a pipeline-parallel engine that are not modelled (module docstring)."""
    pp, n = sc.engine.pipeline_parallel_size, sc.cluster.num_replicas
    if pp <= 1:
        return
    if sc.cluster.disaggregation is not None:
        raise ConfigError(sc.source_path, "cluster.disaggregation", (
            f"disaggregated prefill/decode pools of pipeline-parallel engines ({PP_KEY} {pp}) are not modelled: "
            "the KV hand-off knows one-stage engines only; remove cluster.disaggregation (replicas of the "
            "pipeline-parallel engine behind a router run) or set pipeline_parallel_size: 1"))
    if n > 1 and pipeline_mode(sc.engine) is PipelineMode.VIRTUAL_ENGINES:
        raise ConfigError(sc.source_path, "cluster.num_replicas", (
            f"{n} replicas of a pipeline-parallel engine in vLLM V0's form (engine.pipeline_mode virtual-engines,"
            f" {PP_KEY} {pp}) are not modelled: that engine is itself modelled as {pp} virtual engines behind a"
            " router of their own, and replicas of it would need routers under the cluster's router; use "
            "engine.pipeline_mode: batch-queue (vLLM V1's form) or cluster.num_replicas: 1"))


class BatchQueueReplica(Replica, BatchQueueSimulation):
    """One replica of a cluster, a whole batch-queue pipeline engine (module docstring).

    Method order: a Replica's (``accept``, ``outstanding``, ``wake``, ``_submit`` through the
    router, ``result``), then the batch queue's engine loop (``_engine``, ``_pump``, ``_apply``...)."""

    def __init__(self, cluster: PipelineCluster, index: int, parts: EngineParts,  # noqa: PLW0231
                 role: str | None = None) -> None:
        Replica.__init__(self, cluster, index, parts, role)  # assembled on the cluster's clock, macro-steps off
        self._init_queue(parts.sc.engine.pipeline_parallel_size)  # its own stages, runner and batch log

    def result(self, end_s: float) -> SimResult:
        out = Replica.result(self, end_s)
        out.extra["pipeline"] = self.pipeline_info()  # this replica's stages
        return out


class PipelineCluster(ClusterSimulation):
    """N batch-queue pipeline engines behind the cluster's router (module docstring);
    ``run()`` returns a ClusterResult with ``extra["pipeline"]["form"]`` ``batch-queue``."""

    replica_class = BatchQueueReplica

    def __init__(self, sc: Scenario, progress=None, planned: tuple | None = None) -> None:
        check_pipeline_cluster(sc)
        if pipeline_mode(sc.engine) is not PipelineMode.BATCH_QUEUE or sc.engine.pipeline_parallel_size < 2:
            raise ValueError("PipelineCluster runs replicas of a batch-queue pipeline-parallel engine")
        # macro-steps off: a step waits for stages the replica's other batches hold
        super().__init__(sc, progress, macro_steps=False, planned=planned)

    def run(self) -> ClusterResult:
        result = super().run()
        result.extra["pipeline"] = {"form": PipelineMode.BATCH_QUEUE.value, "plan": self.plan}
        return result


__all__ = ["BatchQueueReplica", "PipelineCluster", "check_pipeline_cluster"]

"""A pipeline-parallel replica: batches in flight through stages of layers (issue #15 item 2).

With ``engine.pipeline_parallel_size`` = pp > 1 a replica's layers are split into pp stages
(sim/model/parallel.py), each on ``tensor_parallel_size`` GPUs. Each stage is a SimPy
resource a batch holds for its stage time, the activations crossing the p2p link in between
(sim/engine/pipeline/stages.py, stage times from sim/cost/pipeline.py): pipeline bubbles and
overlap come out of the simulation, not out of a formula.

Which batches are in flight is the engine's business. vLLM has had two forms, and
``engine.pipeline_mode`` picks one (default: the profile's, sim/config/profile_schema.py
``PIPELINE_MODES``: ``virtual-engines`` for ``vllm-v0``, ``batch-queue`` for every other):

- **V0: virtual engines** (vllm/engine/llm_engine.py and vllm/core/scheduler.py before
  V1): pp virtual engines, each with its own scheduler and block manager of 1/pp of the KV
  blocks (``num_gpu_blocks //= pipeline_parallel_size``) and of the swap space; a new
  request goes to the scheduler with the fewest unfinished requests
  (``_add_processed_request``: "Add the sequence group to the scheduler with least
  unfinished seqs"); each virtual engine runs one batch at a time (the async engine keeps
  one ``engine_step`` per virtual engine in flight), so a request is in at most one batch.
  This module runs it: the virtual engines are the cluster machinery's replicas
  (sim/engine/cluster/simulation.py) on one SimPy clock, fed by a least-outstanding router without
  sticky sessions, each with its own scheduler, allocator of ``num_gpu_blocks // pp``
  blocks, swap space of 1/pp, front end and step log, all sharing the stages. Macro-steps
  (sim/engine/macro/run.py) advance one engine's clock by summed step durations, which is not
  valid when a step waits for stages another engine holds: a pipeline run has them off.
- **V1: a batch queue** (vllm/v1/engine/core.py ``EngineCore``: ``batch_queue_size =
  max_concurrent_batches`` = pp, ``step_with_batch_queue``): one scheduler and one KV pool
  of all the blocks, up to pp batches in flight, a request scheduled again only after its
  batch came back. sim/engine/pipeline/batch_queue.py runs it (its docstring has what
  vLLM's scheduler does with requests in flight).

``PipelineSimulation(sc)`` builds the form the scenario runs: a :class:`PipelineSimulation`
(virtual engines; ``run()`` returns a ClusterResult), a
:class:`~sim.engine.pipeline.batch_queue.BatchQueueSimulation` (``run()`` returns a
SimResult) or, with ``cluster.num_replicas`` > 1, a
:class:`~sim.engine.pipeline.cluster.PipelineCluster` of batch-queue replicas behind the
cluster's router (``run()`` returns a ClusterResult); ``summarize_pipeline``
(sim/engine/pipeline/summary.py) writes each one's summary.json. Replicas of the
virtual-engines form, and disaggregated pools of either form, are refused
(sim/engine/pipeline/cluster.py ``check_pipeline_cluster`` says why).
"""
from __future__ import annotations

import dataclasses

import simpy

from sim.config.cluster_schema import ClusterConfig
from sim.config.profile_schema import PipelineMode, pipeline_mode
from sim.config.scenario import Scenario
from sim.engine.cluster.simulation import ClusterResult, ClusterSimulation
from sim.engine.cluster.replica import Replica
from sim.engine.parts import EngineParts, SessionDriver, build_parts, engine_state
from sim.engine.pipeline.batch_queue import BatchQueueSimulation
from sim.engine.pipeline.cluster import PipelineCluster, check_pipeline_cluster
from sim.engine.pipeline.stages import StagedRunner, Stages
from sim.engine.cluster.router import Router
from sim.errors import ConfigError
from sim.model.memory import check_fits_one_sequence
from sim.model.parallel import PP_KEY


class VirtualEngine(Replica):
    """One of a pipeline replica's virtual engines: a cluster replica whose batches hold the stages."""

    def __init__(self, cluster: PipelineSimulation, index: int, parts: EngineParts) -> None:
        super().__init__(cluster, index, parts)
        self.runner = StagedRunner(parts.cost)
        self.core.runner = self.runner
        self._stages = self._through_stages  # read by Simulation._engine instead of a plain timeout

    def _through_stages(self, step):
        times, transfer = self.runner.last
        yield from self.cluster.stages.hold(times, transfer)


def virtual_engine_parts(first: EngineParts, pp: int) -> list[EngineParts]:
    """The parts of ``pp`` virtual engines: each 1/pp of the blocks and of the swap space (vLLM V0)."""
    sc = first.sc
    plan = dataclasses.replace(first.plan, num_gpu_blocks=first.plan.num_gpu_blocks // pp)
    try:
        check_fits_one_sequence(plan, sc.engine.max_model_len, source=sc.source_path)
    except ConfigError as exc:
        raise ConfigError(sc.source_path, PP_KEY, (
            f"{pp} virtual engines each get 1/{pp} of the KV pool (vLLM V0's pipeline parallelism): "
            f"{exc.message}")) from None
    kv = sc.kv.model_copy(update={"swap_space_gb": sc.kv.swap_space_gb / pp})
    sc = sc.model_copy(update={"kv": kv})
    out = []
    for _ in range(pp):
        allocator, swap, preemptor, scheduler = engine_state(sc, first.model, plan, first.budget, first.profile)
        out.append(dataclasses.replace(first, sc=sc, plan=plan, allocator=allocator, swap=swap,
                                       preemptor=preemptor, scheduler=scheduler))
    return out


class PipelineSimulation(ClusterSimulation):
    """One pipeline-parallel replica in vLLM V0's form (module docstring); ``run()`` returns a
    ClusterResult whose ``replicas`` are the virtual engines and whose ``extra["pipeline"]`` holds
    the stages' figures (``summarize_pipeline`` writes summary.json).

    Constructing it for a scenario whose form is ``batch-queue`` gives a BatchQueueSimulation
    instead (``__new__``), so ``sim run`` and ``sim sweep`` need not know the forms apart."""

    def __new__(cls, sc: Scenario, progress=None, planned: tuple | None = None):
        check_pipeline_cluster(sc)  # disaggregated pools, replicas of virtual engines: one error line
        if cls is PipelineSimulation and pipeline_mode(sc.engine) is PipelineMode.BATCH_QUEUE:
            if sc.cluster.num_replicas > 1:  # replicas of the batch queue behind a router
                return PipelineCluster(sc, progress, planned)
            return BatchQueueSimulation(sc, progress, planned=planned)
        return super().__new__(cls)

    def __init__(self, sc: Scenario, progress=None, planned: tuple | None = None) -> None:  # noqa: PLW0231
        pp = sc.engine.pipeline_parallel_size  # (the cluster's __init__, per virtual engine)
        check_pipeline_cluster(sc)  # (a subclass may skip __new__'s)
        first = build_parts(sc, planned)  # planned: build_plan(sc), made already (sim run)
        self.sc = sc = first.sc
        self.cal, self.plan, self.sessions = first.cal, first.plan, first.sessions
        self.cost = first.cost
        self.env = simpy.Environment()
        self.driver = SessionDriver(sc, None)  # makes requests; the router places them
        self.requests = self.driver.requests
        self.macro_steps = False  # summed step durations are not valid across shared stages
        self.progress = progress
        self.stages = Stages(self.env, pp)
        self.replicas = [VirtualEngine(self, i, parts) for i, parts in enumerate(virtual_engine_parts(first, pp))]
        # vLLM V0: a new request goes to the virtual engine with the fewest unfinished requests
        self.router = Router(ClusterConfig(router="least-outstanding", sticky_sessions=False), self.replicas)
        self.sticky = False
        self.handoff = None  # no disaggregation (ClusterSimulation's attribute)
        self.replica_of: list[int] = []
        self._home: dict[int, int] = {}

    def run(self) -> ClusterResult:
        result = super().run()
        result.extra["pipeline"] = {"stage_busy_s": list(self.stages.busy_s), "batches": self.stages.batches,
                                    "plan": self.plan, "stage_layers": list(self.cost.stage_layers)}
        return result


__all__ = ["BatchQueueSimulation", "PipelineSimulation", "StagedRunner", "Stages", "VirtualEngine",
           "virtual_engine_parts"]

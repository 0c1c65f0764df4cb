"""A pipeline-parallel replica's step: each stage's share of the batch, and the activations
sent from one stage to the next (issue #15 item 2).

A stage is the model cut to its layers (sim/model/parallel.py ``stage_models``, vLLM's
default split), so its cost model is the ordinary one built on that ModelSpec (tensor
parallelism included: each stage's GPUs hold their shard of its layers) with no formula
changed. Only the last stage computes the logits: a stage before it is charged its cost
model's step less the lm_head part, that is the plain (profile-free) model's step minus
the same step without sampling rows (``num_seqs`` 0: no lm_head GEMM, no logits all-gather,
no sampling rows of a fitted step). Every stage keeps its engine profile's host time (each
vLLM worker prepares its own inputs every step) and the embedding lookup, which is a few
bytes per token.

Between stages the batch's activations cross the calibration's point-to-point link
(``interconnect.p2p_*``, sim/calib/interconnect.py): vLLM's models hand the next stage the
hidden states and the residual (``IntermediateTensors({"hidden_states", "residual"})`` in
vllm/model_executor/models/llama.py), so 2 x tokens x hidden x activation bytes; with
tensor parallelism each of the tp GPUs sends 1/tp of them over its own link and the
receiving stage all-gathers them (``send_tensor_dict(..., all_gather_group=tp group)``).

``step_time_s`` is one batch alone through every stage (the sum of the stage times and the
transfers): a single request's step latency. The overlap of several batches in flight is
not a formula here: sim/engine/pipeline/simulation.py holds each stage as a SimPy resource.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.calib.interconnect import require_p2p
from sim.calib.precision import gemm_precision
from sim.cost.base import CostModel
from sim.cost.build import build_cost_model, build_profiled_cost
from sim.cost.shape import BatchShape
from sim.model.parallel import stage_models
from sim.model.spec import ModelSpec


@dataclass(frozen=True)
class PipelineCost:
    """One cost model per stage (``stages``, first to last), each beside its plain, profile-free
    model (``plain``, which times the lm_head part to take away), and the transfer between two
    stages: ``transfer_fixed_s + tokens x transfer_s_per_token``."""

    stages: tuple[CostModel, ...]
    plain: tuple[CostModel, ...]
    stage_layers: tuple[int, ...]
    transfer_fixed_s: float
    transfer_s_per_token: float
    model_name: str
    calibration_name: str
    kv_dtype: object

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def composition(self):
        return self.stages[-1].composition

    def without_composition(self) -> PipelineCost:
        import dataclasses  # noqa: PLC0415

        return dataclasses.replace(self, stages=tuple(s.without_composition() for s in self.stages),
                                   plain=tuple(s.without_composition() for s in self.plain))

    def stage_times_s(self, shape: BatchShape, idle_before_s: float = 0.0) -> tuple[float, ...]:
        """Seconds each stage computes ``shape`` (module docstring); zeros for an empty step."""
        last = len(self.stages) - 1
        out = []
        for i, cost in enumerate(self.stages):
            t = cost.step_time_s(shape, idle_before_s)
            if i < last and shape.num_seqs > 0:  # no logits before the last stage
                plain = self.plain[i]
                t -= plain.step_time_s(shape, idle_before_s) - plain.step_time_s(
                    shape._replace(num_seqs=0), idle_before_s)
            out.append(t if t > 0.0 else 0.0)
        return tuple(out)

    def transfer_s(self, shape: BatchShape) -> float:
        """Seconds the batch's activations take from one stage to the next (0 without tokens)."""
        m = shape.num_prefill_tokens + shape.num_decode_tokens
        return self.transfer_fixed_s + m * self.transfer_s_per_token if m > 0 else 0.0

    def step_time_s(self, shape: BatchShape, idle_before_s: float = 0.0) -> float:
        """One batch alone through every stage: the stage times plus the transfers between them."""
        times = self.stage_times_s(shape, idle_before_s)
        if not any(times):
            return 0.0
        return sum(times) + (len(times) - 1) * self.transfer_s(shape)

    def swap_time_s(self, num_bytes: float, num_copies: int = 1) -> float:
        """Every stage's GPUs copy their layers' KV over their own PCIe links, in parallel: the
        bytes given are one GPU's (the plan's bytes per block), so one stage's time."""
        return self.stages[0].swap_time_s(num_bytes, num_copies)

    def staging_time_s(self, num_bytes: float, num_launches: int = 1) -> float:
        return self.stages[0].staging_time_s(num_bytes, num_launches)


def build_pipeline_cost(model: ModelSpec, calibration, profile, *, pipeline_parallel_size: int,
                        max_num_seqs: int, **kwargs) -> PipelineCost:
    """The PipelineCost of ``model`` split into ``pipeline_parallel_size`` stages; ``kwargs`` are
    ``build_cost_model``'s (dtypes, ``tensor_parallel_size``). ConfigError naming the calibration's
    ``interconnect`` when it has no point-to-point numbers."""
    pp, tp = pipeline_parallel_size, kwargs.get("tensor_parallel_size", 1)
    ic = require_p2p(calibration, pp)
    stages, plain = [], []
    for spec in stage_models(model, pp):
        cost = build_profiled_cost(spec, calibration, profile, max_num_seqs=max_num_seqs, **kwargs)
        stages.append(cost)
        same = profile.is_eager or calibration.engine_steps_measured  # the profiled model is the plain one
        plain.append(cost if same else build_cost_model(spec, calibration, **kwargs))
    gp = gemm_precision(calibration, kwargs.get("weight_dtype"), kwargs.get("weight_dtype_bytes", 2),
                        kwargs.get("compute_dtype"))
    per_token = 2 * model.hidden_size * gp.act_bytes  # hidden states and residual
    fixed, per_token_s = ic.p2p_latency_s, per_token / tp / ic.p2p_bandwidth_bytes_per_s
    if tp > 1:  # the receiving stage all-gathers the tp slices
        fixed += ic.allgather_latency(tp)  # the tp-GPU all-gather's (interconnect.by_num_gpus): #15 loose ends
        per_token_s += per_token * ic.allgather_s_per_byte(tp)
    first = stages[0]
    return PipelineCost(tuple(stages), tuple(plain), tuple(s.num_layers for s in stage_models(model, pp)),
                        fixed, per_token_s, model.name, first.calibration_name, first.kv_dtype)


def build_engine_cost(model: ModelSpec, calibration, profile, *, pipeline_parallel_size: int = 1,
                      max_num_seqs: int, **kwargs) -> CostModel:
    """A run's cost model: ``build_profiled_cost``'s for one stage, a PipelineCost for more."""
    if pipeline_parallel_size == 1:
        return build_profiled_cost(model, calibration, profile, max_num_seqs=max_num_seqs, **kwargs)
    return build_pipeline_cost(model, calibration, profile, pipeline_parallel_size=pipeline_parallel_size,
                               max_num_seqs=max_num_seqs, **kwargs)


__all__ = ["PipelineCost", "build_engine_cost", "build_pipeline_cost"]

"""Choosing a run's cost model: the fitted kernel models where the calibration has them,
else the datasheet roofline; and the engine profile around it."""

from __future__ import annotations

import dataclasses

from sim.calib.calibration import Calibration
from sim.cost.base import CostModel
from sim.cost.datasheet import build_datasheet_cost
from sim.cost.fitted import build_fitted_cost
from sim.cost.profile import EngineProfile, GraphMode
from sim.cost.profiled import ProfiledCost
from sim.errors import ConfigError
from sim.model.parallel import shard_model
from sim.model.spec import KVDtype, ModelSpec


def build_cost_model(model: ModelSpec, calibration: Calibration, kv_dtype: KVDtype | str = KVDtype.BF16,
                     weight_dtype_bytes: float = 2, *, quant_group_size: int = 64,
                     weight_dtype: str | None = None, compute_dtype: str | None = None,
                     embedding_dtype: str | None = None, tensor_parallel_size: int = 1,
                     attention_data_parallel: bool = False) -> CostModel:
    """The cost model of ``model`` on ``calibration`` (activations are in the weight dtype):
    a ``FittedCost`` when the calibration has a fitted ``gemm``, else a ``DatasheetCost``.

    ``weight_dtype`` names the weights' element type (fp8 and int8 are both one byte);
    ``compute_dtype`` the GEMMs' math mode (None: the weight dtype's own); ``embedding_dtype`` the
    lm_head's weights (None: sim.model.dtypes.embedding_dtype's rule: bf16 under quantized weights);
    ``tensor_parallel_size`` the GPUs one replica is split over (sim/model/parallel.py), and
    ``attention_data_parallel`` whether they run attention data-parallel (datasheet only)."""
    if "gemm" in calibration.kernels:
        if attention_data_parallel:
            raise ConfigError(calibration.file, "kernels", (
                "engine.attention_data_parallel runs on a datasheet calibration only: this one's fitted"
                " kernels time one GPU's steps of the validation engine, which has no such form"))
        return build_fitted_cost(model, calibration, kv_dtype, weight_dtype_bytes, quant_group_size=quant_group_size,
                                 weight_dtype=weight_dtype, compute_dtype=compute_dtype,
                                 embedding_dtype=embedding_dtype, tensor_parallel_size=tensor_parallel_size)
    return build_datasheet_cost(model, calibration, kv_dtype, weight_dtype_bytes, quant_group_size=quant_group_size,
                                weight_dtype=weight_dtype, compute_dtype=compute_dtype, embedding_dtype=embedding_dtype,
                                tensor_parallel_size=tensor_parallel_size,
                                attention_data_parallel=attention_data_parallel)


def build_profiled_cost(model: ModelSpec, calibration: Calibration, profile: EngineProfile, *,
                        max_num_seqs: int, **kwargs) -> CostModel:
    """The cost model under an engine profile (sim/cost/profile.py).

    ``eager`` is the plain cost model. Other profiles wrap a datasheet model built without
    the calibration's step overhead (the profile's host time replaces it), twice: with kernel
    launches (eager steps) and with the profile's ``graph_kernel_s`` a kernel instead (graph
    replays). A measured calibration's fitted models time the validation engine's own steps,
    launches and host work included (``kernel_timing: engine``): they are used as measured (the
    profile still sets scheduling and the front end). Device-timed kernels (``kernel_timing:
    device``, e.g. ``microbench import aiconfigurator``) take the roofline's place inside the
    profile: the fitted cost model built twice as above, its measured attention kernels reading
    KV as they do (no profile KV-read multiplier). The profile's own weight-only kernels replace the
    calibration's ``dequant`` entries (``with_profile_kernels``), and its all-reduce choice picks
    which messages take a measured NCCL curve (``with_profile_allreduce``).
    """
    calibration = with_profile_allreduce(with_profile_kernels(calibration, profile), profile)
    if not profile.gemm_fixed_time and calibration.gemm_fixed_s:  # the engine's own GEMVs (EngineProfile)
        calibration = dataclasses.replace(calibration, gemm_fixed_s=0.0)
    if profile.is_eager or calibration.engine_steps_measured:
        return build_cost_model(model, calibration, **kwargs)
    no_host = dataclasses.replace(calibration, step_overhead_s=0.0)
    if "gemm" in calibration.kernels:  # device-timed kernels (kernel_timing: device): measured attention
        reads = None  # kernels read KV as they do; the profile's KV-read multiplier is a roofline's
    else:
        reads = decode_kv_reads(model, profile, kwargs.get("tensor_parallel_size", 1),
                                kwargs.get("attention_data_parallel", False))

    def _reads(cost):
        return cost if reads is None else dataclasses.replace(cost, decode_kv_reads=reads)

    eager = _reads(build_cost_model(model, no_host, **kwargs))
    if profile.graph_mode is GraphMode.NONE:
        return ProfiledCost(eager, eager, profile, (), 0.0)
    # a replayed kernel costs the GPU graph_kernel_s besides its work (no host launch); the attention
    # kernels a piecewise graph leaves to the host pay the rest of a launch on top
    graph_cal = dataclasses.replace(no_host, kernel_launch_s=profile.graph_kernel_s)
    graph = _reads(build_cost_model(model, graph_cal, **kwargs))
    eager_rest = max(0.0, calibration.kernel_launch_s - profile.graph_kernel_s)
    return ProfiledCost(eager, graph, profile, profile.capture_sizes(max_num_seqs),
                        attention_launch_s=model.num_layers * eager_rest)


def decode_kv_reads(model: ModelSpec, profile: EngineProfile, tensor_parallel_size: int = 1,
                    attention_data_parallel: bool = False) -> float:
    """How many times decode attention reads each KV head under ``profile``: 1 where its kernel
    shares the reads across the query heads of a group (EngineProfile.gqa_shared_kv_reads) or the
    model has no groups (MLA's latent is one shared head), else one GPU's query heads per KV head."""
    if profile.gqa_shared_kv_reads or model.is_mla:
        return 1.0
    shard = shard_model(model, tensor_parallel_size, attention_data_parallel)
    return shard.num_attention_heads / shard.num_kv_heads


def with_profile_kernels(calibration: Calibration, profile: EngineProfile) -> Calibration:
    """``calibration`` with the weight-only efficiencies of ``profile``'s own kernels in its
    ``dequant`` section (EngineProfile.weight_only_kernels); unchanged where the profile has
    none or the calibration has no precision sections (the legacy charge)."""
    p = calibration.precision
    if not profile.weight_only_kernels or p is None:
        return calibration
    dequant = {**(p.dequant or {}), **dict(profile.weight_only_kernels)}
    return dataclasses.replace(calibration, precision=dataclasses.replace(p, dequant=dequant))


def with_profile_allreduce(calibration: Calibration, profile: EngineProfile) -> Calibration:
    """``calibration`` whose interconnect knows which all-reduces the engine runs on its own kernel
    and which on NCCL (EngineProfile.custom_allreduce_bytes, sim/calib/interconnect.py); unchanged
    where it has no interconnect or the profile no choice (``eager``)."""
    ic = calibration.interconnect
    if ic is None or profile.custom_allreduce_bytes is None:
        return calibration
    ic = dataclasses.replace(ic, engine_allreduce=profile.custom_allreduce_bytes)
    return dataclasses.replace(calibration, interconnect=ic)

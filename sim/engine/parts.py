"""Assembling an engine from a scenario: the parts both engines share.

The SimPy simulator (``simulation.py``) and the real engine (``realengine``) are built
from the very same objects: memory plan, cost model, allocator, swap space, preemptor,
scheduler, workload, and the :class:`SessionDriver` that turns sessions into requests.
Only the clock and the step executor differ.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sim.calib.calibration import load_calibration
from sim.calib.host_staged import without_p2p
from sim.calib.interconnect import require_interconnect, require_p2p
from sim.cost.base import CostModel
from sim.cost.datasheet import PCIE_COPY_LATENCY_S
from sim.cost.pipeline import build_engine_cost
from sim.cost.profile import PROFILES, EngineProfile, ProfileName
from sim.cost.profile_setup import engine_profile
from sim.errors import ConfigError
from sim.kv import AllocatorKind, make_allocator
from sim.kv.offload import HostTier, OffloadPagedAllocator, TierSpec
from sim.kv.swap import SwapSpace
from sim.kv.token_budget import TokenBudget, TokenEviction
from sim.model.dtypes import DTYPE_BYTES, embedding_dtype
from sim.model.memory import MemoryPlan, check_fits_one_sequence, plan_memory
from sim.model.parallel import PP_KEY, TP_KEY, check_pipeline_parallel, check_tensor_parallel
from sim.model.spec import KVDtype, ModelSpec
from sim.model.hf_config import load_model
from sim.engine.logs.request_log import RequestLog
from sim.request import Request
from sim.config.paths import file_or_name
from sim.config.offload_schema import DISK_LATENCY_S, DISK_READ_GB_PER_S, DISK_WRITE_GB_PER_S, offload_tiers
from sim.config.scenario import Scenario, WhenKVFull
from sim.engine.host_memory import check_host_memory
from sim.sched import make_scheduler
from sim.sched.preemption import Preemptor
from sim.sched.victim import RemainingOutputModel, VictimPolicy
from sim.workload.generate import SessionSpec, build_workload, read_column, sample_lengths


def relative_to_scenario(sc: Scenario, ref: str) -> str:
    """A file path in a scenario is relative to the scenario's folder; a name stays a name."""
    return file_or_name(sc.base_dir, ref)


#: Engines that refuse, at startup, a max_model_len longer than the model's context (vLLM's
#: _get_and_verify_max_len without VLLM_ALLOW_LONG_MAX_MODEL_LEN; SGLang's context_length check
#: without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN). TensorRT-LLM builds for any max_seq_len.
_CONTEXT_CHECKED = (ProfileName.VLLM_V1, ProfileName.VLLM_V0, ProfileName.SGLANG, ProfileName.SGLANG_04)


def check_context(model: ModelSpec, max_model_len: int, profile: str, src: str) -> None:
    ctx = model.max_context_tokens
    if ctx and max_model_len > ctx and profile in _CONTEXT_CHECKED:
        raise ConfigError(src, "engine.max_model_len", (
            f"{max_model_len:,} is longer than {model.name}'s context, {ctx:,} tokens (its config's "
            f"max_position_embeddings and rope_scaling); engine.profile {profile} refuses it at startup, as the "
            f"engine does: set engine.max_model_len <= {ctx}, or a model with a longer context"))


def build_plan(sc: Scenario):
    """Model, calibration and memory plan of a scenario (ConfigError on bad input)."""
    src = sc.source_path
    model = load_model(relative_to_scenario(sc, sc.model), source=src)
    cal = load_calibration(relative_to_scenario(sc, sc.gpu), source=src, key="gpu")
    eng = sc.engine
    check_context(model, eng.max_model_len, eng.profile, src)
    check_tensor_parallel(model, eng.tensor_parallel_size, src, TP_KEY)
    if eng.attention_data_parallel and (eng.tensor_parallel_size == 1 or eng.pipeline_parallel_size > 1
                                        or "gemm" in cal.kernels):
        raise ConfigError(src, "engine.attention_data_parallel", (
            "runs attention data-parallel over the tensor_parallel_size GPUs: it needs tensor_parallel_size"
            " 2, 4 or 8, no pipeline parallelism and a datasheet calibration (got tensor_parallel_size"
            f" {eng.tensor_parallel_size}, pipeline_parallel_size {eng.pipeline_parallel_size}, calibration"
            f" {cal.name}: {'measured' if 'gemm' in cal.kernels else 'datasheet'})"))
    cal = without_p2p(cal, eng.gpu_p2p, eng.tensor_parallel_size, eng.pipeline_parallel_size, src)  # host-staged
    require_interconnect(cal, eng.tensor_parallel_size)  # tp > 1: the calibration must have one
    check_pipeline_parallel(model, eng.pipeline_parallel_size, src, PP_KEY)  # pipeline parallelism (#15)
    require_p2p(cal, eng.pipeline_parallel_size)  # pp > 1: stages send activations over the p2p link
    plan = plan_memory(
        model, cal.memory_bytes, gpu_memory_utilization=eng.gpu_memory_utilization,
        block_size=sc.kv.block_size, kv_dtype=KVDtype(eng.kv_dtype),
        weight_dtype_bytes=DTYPE_BYTES[eng.weight_dtype],
        max_num_batched_tokens=sc.max_num_batched_tokens, max_num_seqs=sc.scheduler.max_num_seqs,
        max_model_len=eng.max_model_len, activation_peak_bytes=eng.activation_peak_bytes,
        runtime_overhead_bytes=eng.runtime_overhead_bytes, quant_group_size=eng.kv_quant_group_size,
        num_gpu_blocks_override=eng.num_gpu_blocks_override, tensor_parallel_size=eng.tensor_parallel_size,
        pipeline_parallel_size=eng.pipeline_parallel_size, source=src,
        embedding_bytes=DTYPE_BYTES[embedding_dtype(eng.weight_dtype, eng.embedding_dtype)],
        attention_data_parallel=eng.attention_data_parallel,
        kv_free_memory_fraction=eng.kv_cache_free_gpu_mem_fraction,
        engine_profile=eng.profile, memory_accounting=eng.memory_accounting,  # #13, #41: vLLM's or legacy estimates
    )
    budget = token_budget(without_vetoed_defaults(sc, model), model)
    plan = dataclasses.replace(plan, max_kv_tokens_per_seq=budget.kept_tokens(eng.max_model_len))
    null = PROFILES[eng.profile].rules.null_block and sc.kv.allocator == AllocatorKind.PAGED
    check_fits_one_sequence(plan, eng.max_model_len, source=src, reserved_blocks=int(null))
    check_host_memory(sc, plan.bytes_per_block, plan.block_size)  # kv.offload's CPU tier in the host's RAM
    return model, cal, plan


def without_vetoed_defaults(sc: Scenario, model) -> Scenario:
    """``sc`` without the profile defaults its model cannot have: prefix caching (a
    profile default, sim/config/profile_schema.py) on a model whose sliding window is
    shorter than ``max_model_len`` (its evicted tokens break shared prefixes)."""
    window = model.sliding_window
    if ("kv.prefix_caching" in sc.profile_defaults and window and window < sc.engine.max_model_len
            and sc.kv.token_eviction.policy == TokenEviction.NONE):
        kv = sc.kv.model_copy(update={"prefix_caching": False})
        rest = tuple(k for k in sc.profile_defaults if k != "kv.prefix_caching")
        return sc.model_copy(update={"kv": kv, "profile_defaults": rest})
    return sc


def token_budget(sc: Scenario, model) -> TokenBudget:
    """The scenario's token-level KV budget; a model's native sliding window applies
    automatically when the scenario sets none."""
    budget = sc.kv.token_eviction.budget()
    window = model.sliding_window
    if budget.policy == TokenEviction.NONE and window and window < sc.engine.max_model_len:
        if sc.kv.prefix_caching:
            raise ConfigError(sc.source_path, "kv.prefix_caching", (
                f"{model.name} uses sliding-window attention ({window} tokens), whose evicted "
                "tokens break shared prefixes; prefix caching with it is not modelled: set "
                f"kv.prefix_caching: false or engine.max_model_len <= {window}"))
        budget = TokenBudget(TokenEviction.SLIDING_WINDOW, window_tokens=window)
    return budget


def remaining_output_model(sc: Scenario) -> RemainingOutputModel:
    """The output-length distribution the ``longest-remaining`` victim policy may know:
    a fresh sample of the workload's distribution (the trace's column for a replay)."""
    wl = sc.workload
    if wl.trace is not None:
        return RemainingOutputModel(read_column(str(sc.resolve(wl.trace.path)), "num_decode_tokens"))
    rng = np.random.default_rng([sc.seed, 1])  # independent of the workload's own draws
    return RemainingOutputModel(sample_lengths(wl.output_tokens, 20_000, rng, sc))


@dataclass
class EngineParts:
    """Everything an engine needs besides a clock and a step executor."""

    sc: Scenario
    model: ModelSpec
    cal: object
    plan: MemoryPlan
    cost: CostModel
    budget: TokenBudget
    allocator: object
    swap: SwapSpace
    preemptor: Preemptor
    scheduler: object
    sessions: list[SessionSpec]
    profile: EngineProfile = PROFILES[ProfileName.EAGER]  # as run: defaults, calibration, scenario


def build_parts(sc: Scenario, planned: tuple | None = None) -> EngineParts:
    """Fresh parts for one run of ``sc`` (ConfigError on bad input). ``parts.sc`` is the
    scenario as run: ``sc`` without profile defaults its model vetoes. ``planned``: what
    ``build_plan(sc)`` returned, when the caller has it already (``sim run``'s footprint
    check): the memory plan is not made twice."""
    model, cal, plan = build_plan(sc) if planned is None else planned
    sc = without_vetoed_defaults(sc, model)
    profile = engine_profile(sc.engine, cal)  # defaults, this machine's numbers, the scenario's
    cost = build_engine_cost(  # pipeline parallelism: one cost model per stage (sim/cost/pipeline.py)
        model, cal, profile, pipeline_parallel_size=sc.engine.pipeline_parallel_size,
        max_num_seqs=sc.scheduler.max_num_seqs, kv_dtype=KVDtype(sc.engine.kv_dtype),
        weight_dtype_bytes=DTYPE_BYTES[sc.engine.weight_dtype], quant_group_size=sc.engine.kv_quant_group_size,
        weight_dtype=sc.engine.weight_dtype, compute_dtype=sc.engine.compute_dtype,
        embedding_dtype=embedding_dtype(sc.engine.weight_dtype, sc.engine.embedding_dtype),
        attention_data_parallel=sc.engine.attention_data_parallel,
        tensor_parallel_size=sc.engine.tensor_parallel_size)
    budget = token_budget(sc, model)
    allocator, swap, preemptor, scheduler = engine_state(sc, model, plan, budget, profile, cal)
    sessions = build_workload(sc, np.random.default_rng(sc.seed))
    return EngineParts(sc, model, cal, plan, cost, budget, allocator, swap, preemptor,
                       scheduler, sessions, profile)


def host_tier(sc: Scenario, model: ModelSpec, plan: MemoryPlan, cal) -> HostTier:
    """The CPU tier of ``kv.offload`` (and the disk tier below it, if listed): its size in
    blocks (checked against the host memory by build_plan), the host link of the
    calibration (swap_bandwidth: its block copies, else its host copy) unless the scenario names one, and a
    transfer's fixed cost: one copy's (PCIE_COPY_LATENCY_S). vLLM's offloading connector
    since 0.12 lays a block out as one contiguous region across every layer (vLLM PR #27743),
    so a load is one batch of block-sized DMA copies on a stream, whose per-copy cost is in
    the measured copy rate; not one copy per layer, K and V, as a gathered swap pays
    (sim/kv/swap.py): that charged a Llama-3-8B load 0.64 ms, half again the 1.3 ms its 31
    blocks of 2 MiB take at 50 GB/s (docs/KV_OFFLOAD.md)."""
    off, *lower = offload_tiers(sc.kv.offload)
    named = off.bandwidth_gb_per_s * 1e9 if off.bandwidth_gb_per_s is not None else None
    latency = off.latency_s if off.latency_s is not None else PCIE_COPY_LATENCY_S
    tier = HostTier(TierSpec(off.capacity_blocks(plan.block_size, plan.bytes_per_block), plan.bytes_per_block,
                             named or swap_bandwidth(cal, "swap_in"), latency, store_reused_only=off.store == "reused",
                             write_bandwidth_bytes_per_s=named or swap_bandwidth(cal, "swap_out"), warm=off.warm))
    for disk in lower:
        tier.lower = HostTier(TierSpec(
            disk.capacity_blocks(plan.block_size, plan.bytes_per_block), plan.bytes_per_block,
            (disk.bandwidth_gb_per_s or DISK_READ_GB_PER_S) * 1e9,
            disk.latency_s if disk.latency_s is not None else DISK_LATENCY_S,
            write_bandwidth_bytes_per_s=(disk.write_bandwidth_gb_per_s or DISK_WRITE_GB_PER_S) * 1e9, name="disk"))
    return tier


def swap_bandwidth(cal, kernel: str) -> float:
    """The CPU tier's copy rate one way: the calibration's fitted block-scattered copy
    (``swap_in``: loads, ``swap_out``: stores; what the tier's copies do) where it has one,
    else its contiguous host copy (``pcie_bandwidth_bytes_per_s``; older calibrations)."""
    fit = cal.kernels.get(kernel)
    return fit.params["bandwidth_bytes_per_s"] if fit is not None else cal.pcie_bandwidth_bytes_per_s


def engine_state(sc: Scenario, model: ModelSpec, plan: MemoryPlan, budget: TokenBudget,
                 profile: EngineProfile, cal=None) -> tuple:
    """One engine's fresh state: (allocator, swap space, preemptor, scheduler); with
    ``kv.offload``, the allocator keeps a CPU tier (sim/kv/offload.py; ``cal``'s host link)."""
    rules = profile.rules  # the engine's own scheduling decisions (sim/cost/profile.py)
    paged = sc.kv.allocator == AllocatorKind.PAGED
    # vLLM V1's block pool keeps one block as its null block: num_gpu_blocks - 1 are usable.
    num_blocks = plan.num_gpu_blocks - 1 if rules.null_block and paged else plan.num_gpu_blocks
    if sc.kv.offload is not None:
        allocator = OffloadPagedAllocator(
            num_blocks, sc.kv.block_size, host_tier(sc, model, plan, cal), sc.kv.prefix_cache_eviction,
            budget, rules.unhashed_blocks_first)
    else:
        allocator = make_allocator(
            sc.kv.allocator, num_blocks=num_blocks, block_size=sc.kv.block_size,
            max_kv_tokens=plan.max_kv_tokens_per_seq, prefix_caching=sc.kv.prefix_caching,
            eviction=sc.kv.prefix_cache_eviction, budget=budget, unhashed_first=rules.unhashed_blocks_first)
    swap = SwapSpace(int(sc.kv.swap_space_gb * 2**30))
    preemptor = Preemptor(sc.scheduler.preemption, allocator, swap,
                          bytes_per_slot=plan.bytes_per_block / plan.block_size,
                          copies_per_block=model.num_layers * (1 if model.is_mla else 2),
                          transfer=sc.kv.swap_transfer)
    # The watermark in whole blocks of the configured pool, as vLLM counts it
    # (int(watermark * num_gpu_blocks)); a contiguous pool keeps that share of its slots.
    watermark = sc.scheduler.watermark
    watermark_slots = (int(watermark * plan.num_gpu_blocks) * plan.block_size if paged
                       else int(watermark * plan.num_gpu_blocks * plan.block_size))
    scheduler = make_scheduler(
        sc.scheduler.policy, allocator, preemptor,
        max_num_seqs=sc.scheduler.max_num_seqs,
        max_num_batched_tokens=sc.max_num_batched_tokens,
        max_model_len=sc.engine.max_model_len,
        reject_when_full=sc.scheduler.when_kv_full == WhenKVFull.REJECT,
        victim_policy=sc.scheduler.preemption_victim,
        remaining=(remaining_output_model(sc)
                   if sc.scheduler.preemption_victim == VictimPolicy.LONGEST_REMAINING else None),
        watermark_slots=watermark_slots,
        prefill_first=profile.prefill_first, reserve_full_length=profile.reserve_full_length,
        scheduler_steps=profile.scheduler_steps, decodes_first=rules.decodes_first, admit_full_sequence=rules.admit_full_sequence,
        finish_lag=rules.async_finish_lag and profile.async_scheduling, ignore_eos_admission=rules.ignore_eos_admission and sc.workload.ignore_eos and not sc.kv.prefix_caching,
        long_prefill_token_threshold=sc.scheduler.long_prefill_token_threshold)
    return allocator, swap, preemptor, scheduler


def replica_parts(parts: EngineParts) -> EngineParts:
    """Another engine like ``parts``' (a replica of a cluster): the same model, plan, cost
    model, profile and workload, with a fresh allocator, swap space, preemptor and scheduler."""
    allocator, swap, preemptor, scheduler = engine_state(parts.sc, parts.model, parts.plan, parts.budget,
                                                         parts.profile, parts.cal)  # (its own CPU tier, if any)
    return dataclasses.replace(parts, allocator=allocator, swap=swap, preemptor=preemptor, scheduler=scheduler)


class SessionDriver:
    """Turns sessions into requests. Turn k's prompt is the session's shared prefix (if
    any), the previous turns' prompts and answers (not for a closed-loop client's requests,
    ``SessionSpec.history`` False), and the turn's new user tokens; its
    ``max_tokens`` is the workload's, clipped to ``max_model_len`` minus the prompt."""

    def __init__(self, sc: Scenario, scheduler) -> None:
        self.sc = sc
        self.scheduler = scheduler
        self.requests = RequestLog()  # every request made, in arrival order (sim/engine/logs/request_log.py)
        self._history: dict[int, tuple] = {}  # session_id -> segments of the last turn + answer

    def submit(self, session: SessionSpec, turn: int, now: float) -> bool:
        """Make turn ``turn`` of ``session`` arrive at ``now``; False if it was rejected."""
        return self.scheduler.add_request(self.make(session, turn, now))

    def make(self, session: SessionSpec, turn: int, now: float) -> Request:
        """Turn ``turn`` of ``session`` as a request that arrived at ``now``, counted in
        ``requests`` but not yet given to the scheduler (a front end may still hold it)."""
        spec = session.turns[turn]
        history = self._history.get(session.session_id) if session.history else None
        if history is None:
            history = (session.prefix,) if session.prefix is not None else session.prefix_chain or ()
        segments = history + ((session.first_segment + turn, spec.user_tokens),)
        num_prompt = sum([n for _, n in segments]) if history else spec.user_tokens
        room = self.sc.engine.max_model_len - num_prompt
        max_tokens = min(self.sc.workload.max_tokens or room, max(1, spec.output_tokens) if self.sc.workload.ignore_eos else room, room) if room > 0 else 1
        req = Request(len(self.requests), now, segments, max_tokens,
                      max(1, min(spec.output_tokens, max_tokens)), session=session, turn=turn)
        req.prefix_len = session.prefix[1] if session.prefix is not None else 0
        # The turn's user tokens (a segment id no other turn has) and its answer are its own;
        # a later turn of the session repeats them.
        if session.prefix_chain is None:
            req.own_from = num_prompt - spec.user_tokens
            req.followed = session.history and turn + 1 < len(session.turns)
        else:  # a trace's prefix_parent rows: a later row may repeat any token (it claims none)
            req.prefix_len = sum(n for _, n in history)
        self.requests.append(req)
        return req

    def next_turn(self, req: Request) -> tuple[SessionSpec, int, float] | None:
        """After ``req`` finished: (session, next turn, think time), or None if it was the last."""
        session = req.session
        nxt = req.turn + 1
        if nxt < len(session.turns):
            if session.history:  # a closed-loop client's next request does not carry this one
                self._history[session.session_id] = req.segments()
            return session, nxt, session.turns[nxt].think_time_s
        self._history.pop(session.session_id, None)
        return None

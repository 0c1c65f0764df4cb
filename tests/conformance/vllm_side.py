"""vLLM's side of the conformance check: vLLM's own V1 scheduler (``Scheduler``, with its
``KVCacheManager`` and ``BlockPool``), on the CPU, with no model and no GPU.

It is given a ``VllmConfig`` over a fabricated model's config.json (a tiny Llama; no weights
are read, no tokenizer is loaded), a ``KVCacheConfig`` of the workload's ``num_blocks``, and
a fabricated model runner: every request whose scheduled tokens reach the end of its known
tokens samples one token. Needs the ``conformance`` extra (``pip install -e '.[conformance]'``,
vLLM 0.33.0); the records are sim/engine/logs/schedule_log.py's.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from functools import lru_cache
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from tests.conformance.workloads import VOCAB, Workload, token_ids  # noqa: E402

SAMPLED_TOKEN = 7  # what the fabricated runner samples (never EOS; EOS is ignored anyway)


@lru_cache(maxsize=1)
def _model_dir() -> str:
    path = Path(tempfile.mkdtemp(prefix="kvsim-conformance-model-"))
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "vocab_size": VOCAB, "max_position_embeddings": 1 << 16,
        "rms_norm_eps": 1e-6, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False}))
    return str(path)


def make_scheduler(w: Workload):
    s = w.settings
    model = ModelConfig(model=_model_dir(), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=s.max_model_len, seed=0)
    sched_cfg = SchedulerConfig(
        max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
        max_model_len=s.max_model_len, is_encoder_decoder=False, enable_chunked_prefill=True,
        async_scheduling=s.async_scheduling, long_prefill_token_threshold=s.long_prefill_token_threshold,
        watermark=s.watermark)
    cache = CacheConfig(block_size=s.block_size, enable_prefix_caching=s.prefix_caching)
    config = VllmConfig(model_config=model, scheduler_config=sched_cfg, cache_config=cache,
                        device_config=DeviceConfig("cpu"))
    kv = KVCacheConfig(num_blocks=s.num_blocks, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=s.block_size, num_kv_heads=1,
                                                      head_size=1, dtype=torch.float32))])
    config.cache_config.num_gpu_blocks = s.num_blocks
    cls = AsyncScheduler if s.async_scheduling else Scheduler
    sched = cls(vllm_config=config, kv_cache_config=kv,
                structured_output_manager=StructuredOutputManager(config),
                block_size=s.block_size, hash_block_size=s.block_size, log_stats=True)
    hasher = None
    if s.prefix_caching:
        init_none_hash(sha256)
        hasher = get_request_block_hasher(s.block_size, sha256)
    return sched, hasher


def _admission_hits(so) -> dict[str, int]:
    """Prefix-cache hit tokens of the requests (re)admitted by ``schedule()``: their computed
    tokens before this step (what the cache gave them). vLLM's V2 model runner (the default)
    sends resumed requests as new ones; the V1 runner lists them as resumed cached requests."""
    hits = {nr.req_id: nr.num_computed_tokens for nr in so.scheduled_new_reqs}
    cached = so.scheduled_cached_reqs
    for i, rid in enumerate(cached.req_ids):
        if rid in cached.resumed_req_ids:
            hits[rid] = cached.num_computed_tokens[i]
    return hits


def run_vllm(w: Workload, max_steps: int = 20_000) -> list[dict]:
    """The workload on vLLM's scheduler: one record a ``schedule()`` call (sync scheduling:
    schedule, run, update; with ``async_scheduling`` the next step is scheduled before the
    previous one's output is in, as vLLM's engine core does with a batch queue of two). A
    step's ``finished`` are those its output finished (reported by the update that follows)."""
    sched, hasher = make_scheduler(w)
    depth = 2 if w.settings.async_scheduling else 1
    pending = deque(sorted(w.requests, key=lambda r: (r.arrival_step, r.request_id)))
    inflight: deque = deque()  # (output, samples, its record or None)
    records: list[dict] = []
    pool = sched.kv_cache_manager.block_pool
    k = 0
    while k < max_steps:
        while pending and pending[0].arrival_step <= k:
            c = pending.popleft()
            sched.add_request(Request(
                request_id=str(c.request_id), prompt_token_ids=token_ids(c.segments),
                sampling_params=SamplingParams(ignore_eos=True, max_tokens=c.max_tokens),
                pooling_params=None, arrival_time=float(c.arrival_step), block_hasher=hasher))
        if not sched.has_requests() and not inflight:
            if not pending:
                break
            k = pending[0].arrival_step
            continue
        rec = None
        scheduled = False
        if sched.has_requests():
            flush = sched.get_num_unfinished_requests() == 0  # only finished ids left to send
            so = sched.schedule()
            scheduled = True
            samples = {r: not sched.requests[r].is_prefill_chunk for r in so.num_scheduled_tokens}
            if not flush:
                rec = {"step": len(records),
                       "scheduled": [[int(r), n] for r, n in so.num_scheduled_tokens.items()],
                       "preempted": sorted(int(r) for r in so.preempted_req_ids), "finished": [],
                       "hits": {r: n for r, n in _admission_hits(so).items()}}
                records.append(rec)
            inflight.append((so, samples, rec))
        if inflight and (len(inflight) >= depth or not scheduled):
            s_so, s_samples, s_rec = inflight.popleft()
            req_ids = list(s_so.num_scheduled_tokens)
            out = ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                    sampled_token_ids=[[SAMPLED_TOKEN] if s_samples[r] else [] for r in req_ids])
            finished = []
            for eco in sched.update_from_output(s_so, out).values():
                finished += [int(o.request_id) for o in eco.outputs if o.finish_reason is not None]
            if s_rec is not None:
                s_rec["finished"] = sorted(finished)
        if rec is not None:  # the state the next schedule() starts from
            rec["free_blocks"] = pool.get_num_free_blocks()
            rec["running"] = len(sched.running)
            rec["waiting"] = len(sched.waiting)
        k += 1
    return records

"""Conformance workloads: the requests and engine settings both schedulers get.

A request's prompt is a list of *segments* ``(segment id, tokens)``, kvsim's own form
(sim/request.py); vLLM gets token ids made from them (:func:`token_ids`): each segment id
stands for a fixed pseudo-random run of ids, so two prompts share a prefix in vLLM exactly
where they share segments in kvsim, and the prefix caches of both can hit the same blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

VOCAB = 32_000  # the fabricated model's vocabulary (tests/conformance/vllm_side.py)


@dataclass(frozen=True)
class EngineSettings:
    """What both engines are configured with. ``num_blocks`` is vLLM's ``num_gpu_blocks``
    (the KV cache config's block count: one of them is vLLM's null block)."""

    num_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int = 8192
    prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    async_scheduling: bool = False
    watermark: float = 0.0


@dataclass(frozen=True)
class ConformanceRequest:
    request_id: int
    arrival_step: int  # added before the scheduler's call of this index (tests/conformance/drive.py)
    segments: tuple[tuple[int, int], ...]
    max_tokens: int  # generated in full (vLLM: ignore_eos)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(n for _, n in self.segments)


@dataclass(frozen=True)
class Workload:
    settings: EngineSettings
    requests: tuple[ConformanceRequest, ...]
    label: str = ""
    notes: dict = field(default_factory=dict)


MAX_SEGMENT = 1 << 14  # no segment is longer


@lru_cache(maxsize=1024)
def _segment_ids(segment: int) -> np.ndarray:
    rng = np.random.default_rng([segment & 0xFFFFFFFF, 7919])
    return rng.integers(1, VOCAB, size=MAX_SEGMENT, dtype=np.int64)


def token_ids(segments) -> list[int]:
    """The prompt's token ids: the first n of each segment's own pseudo-random run, so a
    segment's first n tokens are the same in every prompt."""
    ids: list[int] = []
    for seg, n in segments:
        ids.extend(_segment_ids(seg)[:n].tolist())
    return ids


def random_workload(seed: int) -> Workload:
    """One random workload over the settings the issue names: memory pressure or none,
    shared prefixes, ``max_num_seqs`` binding, prompts over several chunks, budgets
    256-8,192, block sizes 16 and 32, arrivals spread over steps."""
    rng = np.random.default_rng(seed)
    block_size = int(rng.choice([16, 32]))
    budget = int(rng.choice([256, 512, 1024, 2048, 4096, 8192]))
    num_requests = int(rng.integers(20, 70))
    max_num_seqs = int(rng.choice([4, 8, 16, 32, 256]))
    long_prompts = rng.random() < 0.3
    prompt_max = 6000 if long_prompts else 1500
    max_model_len = 8192
    prefix_caching = bool(rng.random() < 0.7)
    num_prefixes = int(rng.integers(0, 4))
    prefix_lens = [int(rng.integers(block_size, 40 * block_size)) for _ in range(num_prefixes)]
    spread = int(rng.choice([0, 0, 20, 200]))  # arrivals all at once or over this many steps
    reqs = []
    next_segment = 1000
    for i in range(num_requests):
        segs = []
        if num_prefixes and rng.random() < 0.6:
            p = int(rng.integers(num_prefixes))
            segs.append((p + 1, prefix_lens[p]))
        own = int(np.exp(rng.uniform(np.log(8), np.log(prompt_max))))
        segs.append((next_segment, own))
        next_segment += 1
        prompt = sum(n for _, n in segs)
        if prompt >= max_model_len - 1:
            segs = [(next_segment, max_model_len // 2)]
            next_segment += 1
            prompt = max_model_len // 2
        out = int(rng.integers(1, min(300, max_model_len - prompt)))
        arrival = int(rng.integers(0, spread + 1)) if spread else 0
        reqs.append((arrival, i, tuple(segs), out))
    reqs.sort()
    requests = tuple(ConformanceRequest(i, a, s, o) for i, (a, _, s, o) in enumerate(reqs))
    # Memory: from ample to a pool a few requests fill.
    need = sum(-(-(r.num_prompt_tokens + r.max_tokens) // block_size) for r in requests)
    biggest = max(-(-(r.num_prompt_tokens + r.max_tokens) // block_size) for r in requests)
    pressure = rng.choice(["none", "some", "high"])
    share = {"none": 1.2, "some": 0.4, "high": 0.12}[str(pressure)]
    num_blocks = max(biggest + 2, int(need * share))
    # One sequence of max_model_len tokens must fit the pool (both engines refuse otherwise).
    max_model_len = min(max_model_len, (num_blocks - 1) * block_size)
    async_scheduling = bool(rng.random() < 0.6)  # vLLM's default is on
    threshold = int(rng.choice([0, 0, 0, 64, 256, 1000]))
    watermark = float(rng.choice([0.0, 0.0, 0.0, 0.01, 0.04]))
    settings = EngineSettings(num_blocks=num_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
                              max_num_batched_tokens=budget, max_model_len=max_model_len,
                              prefix_caching=prefix_caching, long_prefill_token_threshold=threshold,
                              async_scheduling=async_scheduling, watermark=watermark)
    return Workload(settings, requests, label=f"seed {seed}",
                    notes={"pressure": str(pressure), "spread": spread, "prefixes": num_prefixes,
                           "async": async_scheduling, "threshold": threshold, "watermark": watermark})

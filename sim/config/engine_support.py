"""Scenario settings the engine a profile names does not have: notes, not refusals.

``engine.profile`` names a real engine (sim/cost/profile.py); some of kvsim's policies exist
in none of them or not in that one (vLLM V1 has no swap preemption). kvsim still runs such a
scenario, as a what-if on that engine's step times, and says so in the run's notes
(summary.json ``notes``, the terminal's ``note`` lines). They are not refused: the profile
is also the default one (``vllm-v1``), which scenarios sweeping kvsim's policies run under.

Each entry below is what the engine does instead, from its own scheduler (``eager``, kvsim's
engine-neutral model, and ``compiled``, a single-stream decoder, get no notes).
"""

from __future__ import annotations

from sim.cost.profile import ProfileName as P

_VLLM = (P.VLLM_V1, P.VLLM_V0)
_SERVERS = (P.VLLM_V1, P.VLLM_V0, P.SGLANG, P.TRTLLM, P.TRTLLM_PYTORCH)

#: (key, value, the profiles that lack it, what those engines do instead, the profiles that have it)
MISSING = (
    ("scheduler.preemption", "swap", (P.VLLM_V1,),
     "vLLM V1 always recomputes a preempted request (swapping to CPU went with the V0 engine)", "vllm-v0, eager"),
    ("scheduler.preemption", "swap", (P.SGLANG,),
     "SGLang retracts a request and recomputes it later; it never swaps its KV to CPU", "vllm-v0, eager"),
    ("scheduler.preemption", "swap", (P.TRTLLM, P.TRTLLM_PYTORCH),
     "TensorRT-LLM pauses a request and recomputes it; it never swaps its KV to CPU", "vllm-v0, eager"),
    ("scheduler.policy", "static", (P.VLLM_V1, P.VLLM_V0, P.SGLANG),
     "the engine batches continuously (iteration-level scheduling)", "eager"),
    ("scheduler.when_kv_full", "reject", _SERVERS,
     "the engine queues a request until its KV fits; rejecting it models a naive server", "eager"),
    ("scheduler.preemption_victim", ("fewest-blocks", "most-blocks", "longest-remaining"), _VLLM,
     "vLLM preempts the most recently admitted request (lifo)", "eager"),
    ("kv.allocator", ("contiguous-static", "contiguous-exact"), _VLLM + (P.SGLANG,),
     "the engine allocates its KV cache in blocks (paged)", "eager"),
    ("kv.prefix_cache_eviction", ("lfu", "fifo"), _VLLM,
     "vLLM evicts cached prefix blocks least recently used first (lru)", "eager"),
)


def _value(sc, key: str) -> str:
    section, name = key.split(".")
    return str(getattr(getattr(sc, section), name))


def engine_notes(sc) -> list[str]:
    """One note per setting of ``sc`` that its profile's engine does not have (module docstring)."""
    profile = P(sc.engine.profile)
    named = "profile" in sc.engine.model_fields_set
    where = f"engine profile {profile}" + ("" if named else " (the default)")
    out = []
    for key, values, lacking, instead, has in MISSING:
        value = _value(sc, key)
        if profile not in lacking or value not in ((values,) if isinstance(values, str) else values):
            continue
        if key == "kv.prefix_cache_eviction" and not sc.kv.prefix_caching:
            continue  # no prefix cache, nothing evicted: the sweep's no-effect notes say so
        out.append(f"{key}: {value} does not exist in {where}: {instead}; this run is a what-if on its step "
                   f"times (profiles that have it: {has})")
    return out

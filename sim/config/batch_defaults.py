"""vLLM V1's batch limits by GPU, for a ``vllm-v1`` scenario that sets none (issue #41).

When its user sets neither, vLLM V1 picks ``max_num_seqs`` and ``max_num_batched_tokens``
at startup from the device's total memory, its name and how it is driven (the usage
context: the ``LLM`` class in process, or the OpenAI API server), in
``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py). As vLLM 0.33.0 does it:

========================================  ============  =====================================
GPU (total memory as CUDA reports it)     max_num_seqs  max_num_batched_tokens: offline, server
========================================  ============  =====================================
>= 160 GiB (B200, B300, MI300X)           1024          16384, 16384
>= 70 GiB, not an A100 (H100, H200, H20)  1024          16384, 8192
the rest (A100, L40S, RTX cards, ...)     256           8192, 2048
========================================  ============  =====================================

The tiers grew over releases: PR #12369 (January 2025) gave H100/H200 (by name) the middle
row's budgets; PR #16158 (April 2025) kept 1024 sequences there only; PR #17073 (April 2025)
chose by memory instead of name; PR #17885 (May 2025) kept the A100 80GB on the last row; v0.28.0
added the >= 160 GiB row. A published case of an older vLLM states its own limits.

kvsim reads the memory and name from the scenario's calibration (``memory_bytes``,
``gpu_name``); ``engine.entrypoint: offline`` is the ``LLM`` class, ``api-server`` and
``chat`` the API server. A key the scenario sets is left alone; the token budget is filled only
where the scheduler chunks prompts (``chunked-prefill``, the profile's default), as V1 always
does: without chunking kvsim keeps its own rule (``Scenario.max_num_batched_tokens``).
"""

from __future__ import annotations

from pathlib import Path

from sim.calib.calibration import load_calibration
from sim.config.paths import file_or_name
from sim.cost.profile import DEFAULT_PROFILE, ProfileName
from sim.cost.profile_kinds import Entrypoint
from sim.errors import ConfigError

#: The calibration a scenario without ``gpu`` runs on.
DEFAULT_GPU = "a100-80gb"

GIB = 1 << 30
#: vLLM's tiers, top first: (least total memory, a name that keeps a GPU out, max_num_seqs,
#: token budget of the LLM class, token budget of the API server).
VLLM_V1_TIERS = (
    (160 * GIB, None, 1024, 16384, 16384),
    (70 * GIB, "a100", 1024, 16384, 8192),
    (0, None, 256, 8192, 2048),
)


def vllm_v1_batch_defaults(memory_bytes: int, gpu_name: str, offline: bool) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM V1 starts with on this GPU (module docstring)."""
    for least, excluded, seqs, llm_tokens, server_tokens in VLLM_V1_TIERS:
        if memory_bytes >= least and not (excluded and excluded in gpu_name.lower()):
            return seqs, llm_tokens if offline else server_tokens
    raise AssertionError("the last tier takes every GPU")


def _gpu(data: dict) -> tuple[int, str] | None:
    """(memory_bytes, gpu_name) of the scenario's calibration; None if it does not load (the
    run's memory plan reports that, with its key)."""
    ref = data.get("gpu", DEFAULT_GPU)
    if not isinstance(ref, str):
        return None
    source = data.get("source_path", "<scenario>")
    base = Path(source).resolve().parent if isinstance(source, str) else Path.cwd()
    try:
        cal = load_calibration(file_or_name(base, ref), source=str(source))
    except (ConfigError, OSError, ValueError):
        return None
    return int(cal.memory_bytes), cal.gpu_name


def fill_batch_defaults(data: dict, filled: list[str]) -> dict:
    """``data`` (a raw scenario mapping, profile defaults already in) with vLLM V1's batch
    limits for its GPU where it is a ``vllm-v1`` scenario that leaves them unset; the keys
    filled are appended to ``filled``."""
    engine = data.get("engine", {})
    sched = data.get("scheduler", {})
    if not isinstance(engine, dict) or not isinstance(sched, dict):
        return data
    if engine.get("profile", DEFAULT_PROFILE) != ProfileName.VLLM_V1:
        return data
    want_seqs = "max_num_seqs" not in sched
    want_tokens = "max_num_batched_tokens" not in sched and sched.get("policy") == "chunked-prefill"
    if not (want_seqs or want_tokens):
        return data
    gpu = _gpu(data)
    if gpu is None:
        return data
    seqs, tokens = vllm_v1_batch_defaults(*gpu, offline=engine.get("entrypoint") == Entrypoint.OFFLINE)
    sched = dict(sched)
    if want_seqs:
        sched["max_num_seqs"] = seqs
        filled.append("scheduler.max_num_seqs")
    if want_tokens:
        sched["max_num_batched_tokens"] = tokens
        filled.append("scheduler.max_num_batched_tokens")
    return {**data, "scheduler": sched}


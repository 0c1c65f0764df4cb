"""The names of sim/cost/profile.py's choices: the engine profiles, CUDA-graph modes, how requests
reach the engine (``engine.entrypoint``), where output tokens are processed, and the engines'
default CUDA-graph capture sizes. Re-exported by sim/cost/profile.py. Pure."""

from __future__ import annotations

from enum import StrEnum


class ProfileName(StrEnum):
    EAGER = "eager"
    VLLM_V1 = "vllm-v1"
    VLLM_V0 = "vllm-v0"
    SGLANG = "sglang"
    SGLANG_04 = "sglang-0.4"
    TRTLLM = "trtllm"
    TRTLLM_PYTORCH = "trtllm-pytorch"
    COMPILED = "compiled"
    LMDEPLOY = "lmdeploy"


class GraphMode(StrEnum):
    NONE = "none"  # every kernel launched from the host
    DECODE = "decode"  # pure-decode batches replay a full graph
    FULL_AND_PIECEWISE = "full-and-piecewise"  # + mixed/prefill steps as piecewise graphs


class Entrypoint(StrEnum):
    """How requests reach the engine (scenario ``engine.entrypoint``)."""

    API_SERVER = "api-server"  # an HTTP server streaming to its clients: the profile's front end
    OFFLINE = "offline"  # the engine's own Python/C++ API in process (LLM.generate, trtllm-bench): none
    CHAT = "chat"  # an api-server whose clients call its chat route: + frontend_chat_request_s a request


class OutputProcessing(StrEnum):
    """Where output tokens are detokenised and streamed (``frontend_token_s`` each)."""

    SEPARATE = "separate"  # the front end's own process: overlaps the engine loop, queues when saturated
    INLINE = "inline"  # in the engine loop: its time adds to every step


def vllm_capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM V1's default ``cudagraph_capture_sizes``: 1, 2, 4, multiples of 8 below 256, then
    multiples of 16 up to min(2 x max_num_seqs, 512) (vllm/config, ``set_cudagraph_sizes``)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return tuple(s for s in sizes if s <= top)


def v0_capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """vLLM V0's ``_BATCH_SIZES_TO_CAPTURE`` (1, 2, 4, 8, 16, ..., 256), capped at max_num_seqs
    rounded up to a captured size."""
    sizes = [1, 2, 4, *range(8, 257, 8)]
    keep = [s for s in sizes if s < max_num_seqs]
    return tuple(keep + [s for s in sizes if s >= max_num_seqs][:1])

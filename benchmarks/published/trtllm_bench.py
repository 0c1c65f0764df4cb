"""The engine limits ``trtllm-bench build --dataset`` picks, for the TensorRT-LLM cases.

TensorRT-LLM's perf-overview pages (v0.13, 0.17) build every engine with ``trtllm-bench build
--dataset $dataset_file``: the build reads the dataset's average ISL/OSL and sizes the engine's
max batch size and max num tokens with a tuning heuristic (``calc_engine_setting`` and
``finetune_setting`` in ``tensorrt_llm/bench/build/tuning.py``; what follows restates its
arithmetic, not its code):

- KV bytes a token: 2 (K, V) x layers x max(TP, KV heads) x head size x 1 byte with FP8 (2 else), in GiB;
- engine size: parameters / 1e9 x 1 byte with FP8 (2 else), subtracted from the GPUs' total memory
  (NVML's, GiB) x TP x PP; 0.95 of the rest is the KV cache the build assumes;
- requests that fit: that cache / (KV a token x (ISL + OSL)), at most 4096, over PP;
- max batch size: that count rounded up (to 32 below 256, at least 64; to 128 below 1024; else 256);
- max num tokens: requests x (1 + ISL / OSL), at most 32768, rounded up (to 256 below 4096, at
  least 2048; to 512 below 8192; else 1024).

The engine then runs with these limits (trtllm-bench throughput takes the engine's), so a case's
``scheduler.max_num_seqs`` and ``max_num_batched_tokens`` come from here instead of a guess. The
PyTorch backend's ``trtllm-bench throughput`` (the 00f3768 page, no limits given) calls the same
heuristic in its later form (engine size in GiB, NVFP4 weights at half a byte) and, with chunked
prefill off, raises max num tokens to the longest prompt plus the max batch size (``get_settings``
in ``tensorrt_llm/bench/benchmark/utils/general.py``).
``python benchmarks/published/trtllm_bench.py --write`` rewrites the three pages' cases (idempotent).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

#: The perf-overview pages built with ``trtllm-bench build --dataset``, TRT engine backend (case id prefixes)
TRT_PAGES = ("trtllm013-", "trtllm017-")
#: The page run with ``trtllm-bench throughput --backend pytorch`` and no limits given (commit 00f3768)
PYTORCH_PAGES = ("trtllm10-",)
PAGES = TRT_PAGES + PYTORCH_PAGES

#: The pages' ``$num_requests`` table, by (ISL, OSL) (the same rows on all three; 1000/2000 on 00f3768's)
NUM_REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000,
                (2048, 2048): 1500, (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000,
                (20000, 2000): 1000, (1000, 2000): 1500}

#: bytes a parameter / a KV element by kvsim dtype, as the heuristic counts them (16-bit: 2)
ELEM_BYTES = {"fp8": 1.0, "fp4": 0.5}

GIB = 1024 ** 3

SEQ_HOST_S_FIT = 5e-6

#: The TRT engine backend of these releases: host work between steps (TensorRT-LLM's overlap
#: scheduler belongs to the later PyTorch backend's PyExecutor), and a host time per sequence in
#: the step, fitted over the 0.17 page's 311 rows (0, 5 and 10 us: 8.45, 7.32, 9.34% MAPE) with
#: the v0.13 page's 690 rows kept as its check (benchmarks/RESULTS.md, round 9)
TRT_BACKEND_OVERRIDES = {"async_scheduling": False, "seq_host_s": SEQ_HOST_S_FIT}


def engine_limits(*, num_params: int, num_layers: int, num_kv_heads: int, head_dim: int, weight_bytes: float,
                  kv_bytes: float, tp: int, pp: int, isl: int, osl: int, gpu_memory_bytes: float,
                  kv_fraction: float = 0.95, engine_unit: float = 1e9) -> tuple[int, int]:
    """(max batch size, max num tokens) of trtllm-bench's build heuristic (module docstring).

    ``engine_unit``: what the engine size's parameter bytes are divided by, 1e9 in the v0.13-0.17
    form (then subtracted from GiB all the same), 2^30 in the later one."""
    kv_gib_per_token = 2 * num_layers * max(tp, num_kv_heads) * head_dim * kv_bytes / GIB
    engine_size = num_params * weight_bytes / engine_unit
    available = gpu_memory_bytes / GIB * tp * pp - engine_size
    requests = available * kv_fraction / kv_gib_per_token / (isl + osl)
    raw_bs = min(requests, 4096) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    return (_round_up(raw_bs, ((256, 32), (1024, 128), (math.inf, 256)), floor=64),
            _round_up(raw_tokens, ((4096, 256), (8192, 512), (math.inf, 1024)), floor=2048))


def _round_up(x: float, bands: tuple[tuple[float, int], ...], floor: int) -> int:
    """``x`` rounded up to a multiple of the step of the first (bound, step) band it is below, at least ``floor``."""
    step = next(step for bound, step in bands if x < bound)
    return max(floor, step * math.ceil(x / step))


def converted(case) -> bool:
    """Whether --write sets ``case``'s limits: the pages' throughput rows, but for the PyTorch page's
    attention-data-parallel ones (how the later heuristic counts requests per attention rank is not
    restated here; they keep their notes' assumptions)."""
    if not case.id.startswith(PAGES) or case.family != "saturated_throughput":
        return False
    return not (case.id.startswith(PYTORCH_PAGES) and case.attention_data_parallel)


def case_limits(case) -> tuple[int, int, int]:
    """(max_num_seqs, max_num_batched_tokens, num_requests) for one of the pages' cases.

    max_num_batched_tokens is the heuristic's max num tokens raised, with chunked prefill off (all
    three pages), to what a prompt needs: on the TRT pages the prompt (kvsim schedules a whole
    prompt in one step), on the PyTorch page the longest prompt plus the max batch size, as
    ``trtllm-bench throughput`` itself raises it (``get_settings``)."""
    from sim.calib.calibration import load_calibration
    from sim.model.hf_config import load_model

    sc = case.scenario
    model = load_model(str(case.path.parent / sc["model"]) if sc["model"].endswith(".json") else sc["model"])
    eng = sc["engine"]
    isl = sc["workload"]["prompt_tokens"]["value"]
    osl = sc["workload"]["output_tokens"]["value"]
    pytorch = case.id.startswith(PYTORCH_PAGES)
    weight, kv = eng.get("weight_dtype"), eng.get("kv_dtype")
    if pytorch:  # the later form: the checkpoint's own precision, fp4 at half a byte
        elem, kv_elem, unit, fraction = ELEM_BYTES.get(weight, 2.0), ELEM_BYTES.get(kv, 2.0), GIB, \
            case.kv_cache_free_gpu_mem_fraction
    else:  # trtllm-bench build --quantization FP8 (KV FP8 too) or none
        elem = kv_elem = 1.0 if weight == "fp8" else 2.0
        unit, fraction = 1e9, 0.95
    max_bs, max_tokens = engine_limits(
        num_params=model.num_params, num_layers=model.num_layers, num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim, weight_bytes=elem, kv_bytes=kv_elem,
        tp=eng.get("tensor_parallel_size", 1), pp=1, isl=isl, osl=osl,
        gpu_memory_bytes=load_calibration(sc["gpu"]).memory_bytes, kv_fraction=fraction, engine_unit=unit)
    return max_bs, max(max_tokens, isl + max_bs if pytorch else isl), NUM_REQUESTS[(isl, osl)]


def _set_line(text: str, key: str, value: object) -> str:
    new, n = re.subn(rf"^(\s+{key}: )\S+$", rf"\g<1>{value}", text, count=1, flags=re.M)
    if n != 1:
        raise ValueError(f"no '{key}:' line")
    return new


def _words(sentence: str) -> str:
    """A pattern matching ``sentence`` across the line breaks of a folded YAML scalar (N: a number)."""
    parts = [re.escape(w).replace("N", r"[\d,]+") for w in sentence.split()]
    return r"\s+".join(parts)


_CHUNKED = ("The policy is chunked-prefill only because kvsim refuses a token budget below max_model_len without it; "
            "prompts fit the budget, the trtllm profile never preempts, and the page ran without chunked context.")


_OVERRIDES = ("The profile_overrides model the TRT engine backend these pages ran: its host work runs between steps "
              "(async_scheduling false: the overlap scheduler is the PyTorch backend''s, TensorRT-LLM docs "
              "features/overlap-scheduler), and seq_host_s is the host time a sequence adds to a step, one value "
              "fitted over the 0.17 page''s rows, the v0.13 page''s rows its check (benchmarks/RESULTS.md, round 9).")


def _run_sentence(requests: object) -> str:
    return (f"The scenario runs the page''s {requests} requests for this ISL/OSL (its $num_requests table), "
            "all arriving at once.")


def _limits_sentence(seqs: object, tokens: object, pytorch: bool = False) -> str:
    if pytorch:
        return (f"max_num_seqs {seqs} and max_num_batched_tokens {tokens} are the max batch size and max num tokens "
                "trtllm-bench throughput --backend pytorch picks when none are given (its tuning heuristic, restated "
                "in benchmarks/published/trtllm_bench.py; with chunked prefill off it raises the token budget to the "
                "longest prompt plus the max batch size).")
    return (f"max_num_seqs {seqs} and max_num_batched_tokens {tokens} are the engine''s max batch size and max num "
            "tokens as trtllm-bench build --dataset sizes them (its tuning heuristic, restated in "
            "benchmarks/published/trtllm_bench.py; the token budget raised to the prompt where the prompt is longer).")


def _optional(sentence: str) -> str:
    return "(?:" + r"\s+" + _words(sentence) + ")?"


#: the notes' sentences this rewrites, as --write leaves them
_RUN = _words(_run_sentence("N"))
_LIMITS = "|".join(_words(_limits_sentence("N", "N", pytorch)) + _optional(_CHUNKED) + _optional(_OVERRIDES)
                   for pytorch in (False, True))


def _set_overrides(text: str) -> str:
    """``scenario.engine.profile_overrides`` set to TRT_BACKEND_OVERRIDES (replaced where present)."""
    block = textwrap.indent(yaml.safe_dump({"profile_overrides": TRT_BACKEND_OVERRIDES}, sort_keys=False), "    ")
    text = re.sub(r"^    profile_overrides:\n(?:      .*\n)+", "", text, flags=re.M)
    new, n = re.subn(r"^(scenario:\n(?:  (?!engine:).*\n)*  engine:\n)", lambda m: m.group(1) + block, text,
                     count=1, flags=re.M)
    if n != 1:
        raise ValueError("no scenario.engine block")
    return new


def rewrite_case(text: str, seqs: int, tokens: int, requests: int, max_model_len: int, *,
                 pytorch: bool = False) -> str:
    """A case file's text with trtllm-bench's limits, the page's request count and notes saying so,
    and (``pytorch`` false: the TRT engine backend) its profile_overrides (ValueError where the file
    lacks a key or a sentence it rewrites)."""
    chunked = tokens < max_model_len
    for key, value in (("max_num_seqs", seqs), ("max_num_batched_tokens", tokens), ("num_requests", requests),
                       ("policy", "chunked-prefill" if chunked else "continuous")):
        text = _set_line(text, key, value)
    if not pytorch:
        text = _set_overrides(text)
    limits = _limits_sentence(seqs, tokens, pytorch) + (" " + _CHUNKED if chunked else "") \
        + ("" if pytorch else " " + _OVERRIDES)
    text, n1 = re.subn(_RUN, lambda m: _run_sentence(requests), text, count=1)
    text, n2 = re.subn(_LIMITS, lambda m: limits, text, count=1, flags=re.S)
    setup = text.index("  setup:")
    head, tail = text[:setup], text[setup:]
    tail, n3 = re.subn(r"\b\d[\d,]* requests", f"{requests} requests", tail, count=1)
    if (n1, n2, n3) != (1, 1, 1):
        raise ValueError(f"notes not as expected ({n1}, {n2}, {n3})")
    return head + tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the cases' limits (else print them)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import suite

    for case in suite.load_cases():
        if not converted(case):
            continue
        seqs, tokens, requests = case_limits(case)
        print(f"{case.id}: max_num_seqs {seqs}, max_num_batched_tokens {tokens}, num_requests {requests}")
        if args.write:
            mml = case.scenario["engine"]["max_model_len"]
            case.path.write_text(rewrite_case(case.path.read_text(), seqs, tokens, requests, mml,
                                              pytorch=case.id.startswith(PYTORCH_PAGES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

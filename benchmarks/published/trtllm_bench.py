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
``scheduler.max_num_seqs`` and ``max_num_batched_tokens`` come from here instead of a guess.

The v0.13 page's build had no heuristic yet: ``trtllm-bench build`` of that era looked the limits up in
a table shipped with it (``tensorrt_llm/bench/build/benchmark_config.yml``, by Hugging Face model name,
then ``tp{N}_pp{M}``, then the dataset's longest ISL + OSL or else ``general``;
``get_benchmark_engine_settings`` in ``tensorrt_llm/bench/build/build.py`` at 0.12.0, commit 20709ce, and
still at 0.16.0.dev2024112600, commit 3856265; the heuristic replaced it after that). ``V013_TABLE``
restates the stored copy at commit 8fcf9fc (the v0.13.0 tag's own copy is not stored): its Llama-2,
Llama-3, Mixtral and Mistral entries; the Llama 3.1 models, which the table of v0.13.0 must have named
(the lookup refused a model it lacked), take their Llama 3 namesakes' entries (an assumption: the same
architecture, and the page's Llama 3 and 3.1 rows agree within a few percent); entries absent from the
copy (Llama-2-70B at TP 1, Mixtral at TP 8, Llama-3.1-405B) take the page's sample run's 4096 requests and
8192 tokens. trtllm-bench throughput of that era ran with chunked context on (``ExecutorSettingsConfig.chunking``,
default true, ``tensorrt_llm/bench/run/dataclasses.py``), so a prompt longer than max num tokens is chunked. The
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
#: The page whose build looked its limits up in a table (module docstring)
V013_PAGE = "trtllm013-"
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


#: The v0.13-era build's table (module docstring): kvsim model -> TP -> {ISL + OSL or "general": (max batch
#: size, max num tokens)}, from benchmark_config.yml at commit 8fcf9fc (meta-llama/Llama-2-7b-hf,
#: Llama-2-70b-hf, Meta-Llama-3-8B, Meta-Llama-3-70B, mistralai/Mixtral-8x7B-v0.1, Mistral-7B-v0.1)
V013_TABLE = {
    "llama-2-7b": {1: {"general": (4096, 8192)}},
    "llama-2-70b": {2: {"general": (2048, 2048)}, 4: {"general": (4096, 8192), 4224: (256, 8192)},
                    8: {"general": (8192, 16384), 2176: (1024, 16384)}},
    "llama-3-8b": {1: {"general": (2048, 8192)}},
    "llama-3-70b": {1: {"general": (2048, 2048)}, 2: {"general": (256, 1024), 4096: (2048, 1024)},
                    4: {"general": (2048, 1024)}, 8: {"general": (8192, 16384)}},
    "mixtral-8x7b": {2: {"general": (2048, 3072)}, 4: {"general": (8192, 8192)}},
    "mistral-7b": {1: {"general": (4098, 8192)}},
}
#: Models the v0.13 table named that the stored copy lacks, read as their namesakes (an assumption)
V013_SAME_AS = {"llama-3.1-8b": "llama-3-8b", "llama-3.1-70b": "llama-3-70b", "mistral-7b-v0.1-full-attention": "mistral-7b"}
#: The page's sample run ("Max Runtime Batch Size: 4096", "Max Runtime Tokens: 8192"): where the copy has no entry
V013_DEFAULT = (4096, 8192)


def v013_limits(model: str, tp: int, isl: int, osl: int) -> tuple[int, int]:
    """(max batch size, max num tokens) the v0.13-era ``trtllm-bench build`` took from its table."""
    name = model.split("/")[-2] if model.endswith(".json") else model
    entries = V013_TABLE.get(V013_SAME_AS.get(name, name), {}).get(tp)
    if entries is None:
        return V013_DEFAULT
    return entries.get(isl + osl, entries["general"])


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

    The v0.13 page: its build's table (``v013_limits``), chunked context on. The others:
    max_num_batched_tokens is the heuristic's max num tokens raised, with chunked prefill off, to
    what a prompt needs: on the 0.17 page the prompt (kvsim schedules a whole prompt in one step),
    on the PyTorch page the longest prompt plus the max batch size, as ``trtllm-bench throughput``
    itself raises it (``get_settings``)."""
    from sim.calib.calibration import load_calibration
    from sim.model.hf_config import load_model

    sc = case.scenario
    model = load_model(str(case.path.parent / sc["model"]) if sc["model"].endswith(".json") else sc["model"])
    eng = sc["engine"]
    isl = sc["workload"]["prompt_tokens"]["value"]
    osl = sc["workload"]["output_tokens"]["value"]
    if case.id.startswith(V013_PAGE):  # the table; chunked context on, the budget stays as built
        return (*v013_limits(sc["model"], eng.get("tensor_parallel_size", 1), isl, osl), NUM_REQUESTS[(isl, osl)])
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


#: how a page's limits were set: the v0.13 build's table, the TRT build's heuristic, the PyTorch backend's
FORMS = ("table", "heuristic", "pytorch")


def case_form(case) -> str:
    return "table" if case.id.startswith(V013_PAGE) else "pytorch" if case.id.startswith(PYTORCH_PAGES) else "heuristic"


def _limits_sentence(seqs: object, tokens: object, form: str = "heuristic") -> str:
    if form == "pytorch":
        return (f"max_num_seqs {seqs} and max_num_batched_tokens {tokens} are the max batch size and max num tokens "
                "trtllm-bench throughput --backend pytorch picks when none are given (its tuning heuristic, restated "
                "in benchmarks/published/trtllm_bench.py; with chunked prefill off it raises the token budget to the "
                "longest prompt plus the max batch size).")
    if form == "table":
        return (f"max_num_seqs {seqs} and max_num_batched_tokens {tokens} are the engine''s max batch size and max num "
                "tokens as trtllm-bench build of this release took them from its table, benchmark_config.yml (restated, "
                "with what is assumed where the stored copy lacks the model, in benchmarks/published/trtllm_bench.py); "
                "the TRT-LLM decoder''s buffers for that many sequences come out of the KV cache''s memory.")
    return (f"max_num_seqs {seqs} and max_num_batched_tokens {tokens} are the engine''s max batch size and max num "
            "tokens as trtllm-bench build --dataset sizes them (its tuning heuristic, restated in "
            "benchmarks/published/trtllm_bench.py; the token budget raised to the prompt where the prompt is longer).")


_CHUNKED_TABLE = ("The policy is chunked-prefill: trtllm-bench throughput of this release ran with chunked context on "
                  "(ExecutorSettingsConfig.chunking, default true), so a prompt longer than the token budget is split.")


def _optional(sentence: str) -> str:
    return "(?:" + r"\s+" + _words(sentence) + ")?"


#: the notes' sentences this rewrites, as --write leaves them
_RUN = _words(_run_sentence("N"))
_LIMITS = "|".join(_words(_limits_sentence("N", "N", form)) + _optional(_CHUNKED) + _optional(_CHUNKED_TABLE)
                   + _optional(_OVERRIDES) for form in FORMS)


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
                 form: str = "heuristic") -> str:
    """A case file's text with trtllm-bench's limits, the page's request count and notes saying so,
    and (a TRT engine backend page: ``form`` "table" or "heuristic") its profile_overrides (ValueError
    where the file lacks a key or a sentence it rewrites)."""
    pytorch = form == "pytorch"
    chunked = tokens < max_model_len
    for key, value in (("max_num_seqs", seqs), ("max_num_batched_tokens", tokens), ("num_requests", requests),
                       ("policy", "chunked-prefill" if chunked else "continuous")):
        text = _set_line(text, key, value)
    if not pytorch:
        text = _set_overrides(text)
    limits = _limits_sentence(seqs, tokens, form) \
        + ((" " + (_CHUNKED_TABLE if form == "table" else _CHUNKED)) if chunked else "") \
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
                                              form=case_form(case)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

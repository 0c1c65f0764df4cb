"""benchmarks/published/trtllm_bench.py: trtllm-bench's build heuristic, by hand, and the
TensorRT-LLM perf-overview cases carry the limits it gives."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SUITE_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "published"
if str(SUITE_DIR) not in sys.path:
    sys.path.insert(0, str(SUITE_DIR))
_spec = importlib.util.spec_from_file_location("trtllm_bench", SUITE_DIR / "trtllm_bench.py")
tb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tb)
import suite  # noqa: E402  (benchmarks/published/suite.py, on the path above)

H100 = 85039513600  # calibrations/h100-sxm.yaml memory_bytes: 79.20 GiB


def test_an_8b_model_hits_the_request_cap_and_its_token_rounding():
    # KV a token: 2 x 32 x 8 x 128 x 1 B = 2^16 B; (79.20 - 8.03) x 0.95 GiB / 2^16 B / 256 = 4,327 requests -> 4096
    # (the cap), a multiple of 256; tokens 4096 x (1 + 128/128) = 8192, a multiple of 1024
    assert tb.engine_limits(num_params=8_030_000_000, num_layers=32, num_kv_heads=8, head_dim=128, fp8=True,
                            tp=1, pp=1, isl=128, osl=128, gpu_memory_bytes=H100) == (4096, 8192)


def test_a_memory_tight_70b_gets_the_minimum_batch_and_token_budget():
    # (79.20 - 70.55) x 0.95 GiB / (2 x 80 x 8 x 128 B) / 4224 = 12.8 requests: batch 64 (the floor), 2048 tokens
    assert tb.engine_limits(num_params=70_550_000_000, num_layers=80, num_kv_heads=8, head_dim=128, fp8=True,
                            tp=1, pp=1, isl=128, osl=4096, gpu_memory_bytes=H100) == (64, 2048)


def test_the_middle_rounding_branches():
    # fp16 at TP 4: KV heads max(4, 8) = 8; 2 x 80 x 8 x 128 x 2 B = 320 KiB a token;
    # (4 x 79.20 - 141.1) x 0.95 GiB / 320 KiB / 2176 = 249.9 requests: 32 x 8 = 256;
    # tokens 249.9 x (1 + 2048/128) = 4,248: a multiple of 512 -> 4608
    assert tb.engine_limits(num_params=70_550_000_000, num_layers=80, num_kv_heads=8, head_dim=128, fp8=False,
                            tp=4, pp=1, isl=2048, osl=128, gpu_memory_bytes=H100) == (256, 4608)
    # the same at 128/2048: 249.9 requests; tokens 249.9 x 1.0625 = 265.5 -> 2048, the floor
    assert tb.engine_limits(num_params=70_550_000_000, num_layers=80, num_kv_heads=8, head_dim=128, fp8=False,
                            tp=4, pp=1, isl=128, osl=2048, gpu_memory_bytes=H100) == (256, 2048)


CASES = [c for c in suite.load_cases() if c.id.startswith(tb.PAGES)]


def test_every_perf_overview_case_carries_the_heuristics_limits_and_the_trt_backend():
    assert len(CASES) >= 1000
    wrong = []
    for case in CASES:
        seqs, tokens, requests = tb.case_limits(case)
        sched, work = case.scenario["scheduler"], case.scenario["workload"]
        got = (sched["max_num_seqs"], sched["max_num_batched_tokens"], work["num_requests"])
        chunked = tokens < case.scenario["engine"]["max_model_len"]
        overrides = case.scenario["engine"].get("profile_overrides")
        if got != (seqs, tokens, requests) or (sched["policy"] == "chunked-prefill") != chunked \
                or overrides != tb.TRT_BACKEND_OVERRIDES:
            wrong.append(case.id)
    assert not wrong, f"{len(wrong)} cases differ from trtllm_bench.py --write, e.g. {wrong[:3]}"


def test_rewrite_is_idempotent_and_refuses_notes_it_does_not_recognise():
    case = CASES[0]
    text = case.path.read_text()
    limits = tb.case_limits(case)
    assert tb.rewrite_case(text, *limits, case.scenario["engine"]["max_model_len"]) == text
    for bad in (text.replace("max_num_seqs", "max_seqs", 1),  # a key it sets
                text.replace("(its $num_requests table)", "(a guess)", 1)):  # a sentence it rewrites
        with pytest.raises(ValueError):
            tb.rewrite_case(bad, *limits, case.scenario["engine"]["max_model_len"])

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
    assert tb.engine_limits(num_params=8_030_000_000, num_layers=32, num_kv_heads=8, head_dim=128, weight_bytes=1, kv_bytes=1,
                            tp=1, pp=1, isl=128, osl=128, gpu_memory_bytes=H100) == (4096, 8192)


def test_a_memory_tight_70b_gets_the_minimum_batch_and_token_budget():
    # (79.20 - 70.55) x 0.95 GiB / (2 x 80 x 8 x 128 B) / 4224 = 12.8 requests: batch 64 (the floor), 2048 tokens
    assert tb.engine_limits(num_params=70_550_000_000, num_layers=80, num_kv_heads=8, head_dim=128, weight_bytes=1, kv_bytes=1,
                            tp=1, pp=1, isl=128, osl=4096, gpu_memory_bytes=H100) == (64, 2048)


def test_the_middle_rounding_branches():
    # fp16 at TP 4: KV heads max(4, 8) = 8; 2 x 80 x 8 x 128 x 2 B = 320 KiB a token;
    # (4 x 79.20 - 141.1) x 0.95 GiB / 320 KiB / 2176 = 251.3 requests: 32 x 8 = 256;
    # tokens 251.3 x (1 + 2048/128) = 4,272: a multiple of 512 -> 4608
    assert tb.engine_limits(num_params=70_550_000_000, num_layers=80, num_kv_heads=8, head_dim=128, weight_bytes=2, kv_bytes=2,
                            tp=4, pp=1, isl=2048, osl=128, gpu_memory_bytes=H100) == (256, 4608)
    # the same at 128/2048: 251.3 requests; tokens 251.3 x 1.0625 = 267 -> 2048, the floor
    assert tb.engine_limits(num_params=70_550_000_000, num_layers=80, num_kv_heads=8, head_dim=128, weight_bytes=2, kv_bytes=2,
                            tp=4, pp=1, isl=128, osl=2048, gpu_memory_bytes=H100) == (256, 2048)


def test_the_later_form_counts_the_engine_in_gib_and_fp4_at_half_a_byte():
    # engine 8.03e9 x 0.5 B / 2^30 = 3.74 GiB; (79.20 - 3.74) x 0.95 / 2^16 B / 2000 = 587.3 requests:
    # 128 x 5 = 640; tokens 587.3 x 2 = 1,175 -> 2048
    assert tb.engine_limits(num_params=8_030_000_000, num_layers=32, num_kv_heads=8, head_dim=128, weight_bytes=0.5,
                            kv_bytes=1, tp=1, pp=1, isl=1000, osl=1000, gpu_memory_bytes=H100,
                            engine_unit=tb.GIB) == (640, 2048)


def test_the_v013_build_looks_its_limits_up_by_model_tp_and_sequence_length():
    # benchmark_config.yml: Llama-2-70B at TP 4 has an entry for ISL + OSL = 4224 and a general one
    assert tb.v013_limits("llama-2-70b", 4, 128, 4096) == (256, 8192)
    assert tb.v013_limits("llama-2-70b", 4, 1000, 1000) == (4096, 8192)
    assert tb.v013_limits("llama-2-70b", 8, 2048, 128) == (1024, 16384)
    # Llama 3.1 reads as its Llama 3 namesake; a local config path by its folder
    assert tb.v013_limits("llama-3.1-70b", 4, 128, 128) == tb.v013_limits("llama-3-70b", 4, 128, 128) == (2048, 1024)
    assert tb.v013_limits("models/mistral-7b-v0.1-full-attention/config.json", 1, 128, 128) == (4098, 8192)
    # no entry (Mixtral at TP 8, the 405B): the page's sample run
    assert tb.v013_limits("mixtral-8x7b", 8, 128, 128) == tb.v013_limits("llama-3.1-405b", 8, 128, 128) == (4096, 8192)


CASES = [c for c in suite.load_cases() if tb.converted(c)]


def test_every_perf_overview_case_carries_its_builds_limits_and_the_trt_backend():
    assert len(CASES) >= 1090  # 1,001 TRT-backend rows, 90 PyTorch-backend rows
    wrong = []
    for case in CASES:
        seqs, tokens, requests = tb.case_limits(case)
        sched, work = case.scenario["scheduler"], case.scenario["workload"]
        got = (sched["max_num_seqs"], sched["max_num_batched_tokens"], work["num_requests"])
        chunked = tokens < case.scenario["engine"]["max_model_len"]
        overrides = case.scenario["engine"].get("profile_overrides")
        trt = None if case.id.startswith(tb.PYTORCH_PAGES) else tb.TRT_BACKEND_OVERRIDES
        if got != (seqs, tokens, requests) or (sched["policy"] == "chunked-prefill") != chunked or overrides != trt:
            wrong.append(case.id)
    assert not wrong, f"{len(wrong)} cases differ from trtllm_bench.py --write, e.g. {wrong[:3]}"


def test_rewrite_is_idempotent_and_refuses_notes_it_does_not_recognise():
    case = CASES[0]
    text = case.path.read_text()
    limits = tb.case_limits(case)
    form = tb.case_form(case)
    assert tb.rewrite_case(text, *limits, case.scenario["engine"]["max_model_len"], form=form) == text
    later = next(c for c in CASES if c.id.startswith(tb.PYTORCH_PAGES))  # no profile_overrides there
    assert tb.rewrite_case(later.path.read_text(), *tb.case_limits(later), later.scenario["engine"]["max_model_len"],
                           form="pytorch") == later.path.read_text()
    table = next(c for c in CASES if c.id.startswith(tb.V013_PAGE) and c.scenario["scheduler"]["policy"] == "chunked-prefill")
    assert tb.rewrite_case(table.path.read_text(), *tb.case_limits(table), table.scenario["engine"]["max_model_len"],
                           form="table") == table.path.read_text()
    for bad in (text.replace("max_num_seqs", "max_seqs", 1),  # a key it sets
                text.replace("(its $num_requests table)", "(a guess)", 1)):  # a sentence it rewrites
        with pytest.raises(ValueError):
            tb.rewrite_case(bad, *limits, case.scenario["engine"]["max_model_len"], form=form)

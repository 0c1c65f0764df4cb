"""``decode_time_fn`` (the macro-steps' step time of a pure decode batch) gives exactly the
float ``step_time_s`` gives: every stretch of decodes depends on it being the same number."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.scenario import load_scenario
from sim.cost.shape import BatchShape
from sim.engine.parts import build_parts

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"

CASES = {  # scenario, overrides: datasheet GPUs, every engine profile, tensor parallel collectives
    "eager-a100": ("azure-conv.yaml", []),
    "vllm-v1-graphs": ("chatbot.yaml", []),
    "vllm-v0": ("chatbot.yaml", ["engine.profile=vllm-v0"]),
    "sglang-async": ("chatbot.yaml", ["engine.profile=sglang"]),
    "trtllm": ("chatbot.yaml", ["engine.profile=trtllm"]),
    "tp4-70b": ("llama3-70b-tp.yaml", []),
    "kv-read-per-query-head": ("chatbot.yaml", ["engine.profile=trtllm",
                                                "engine.profile_overrides.gqa_shared_kv_reads=false"]),
    "kv-read-per-query-head-tp4": ("llama3-70b-tp.yaml", ["engine.profile_overrides.gqa_shared_kv_reads=false"]),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def cost(request):
    name, overrides = CASES[request.param]
    return build_parts(load_scenario(SCENARIOS / name, overrides)).cost


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 600), kv=st.integers(0, 4_000_000))
def test_the_same_float_as_step_time_s(cost, n, kv) -> None:
    fn = cost.decode_time_fn(n, n)
    assert fn is not None, "a datasheet cost model under every profile has the fast path"
    assert fn(n + kv) == cost.step_time_s(BatchShape(n, 0, n, n + kv, 0.0, 0, 0), 0.0)


def test_a_fitted_cost_model_has_no_fast_path() -> None:
    """Fitted models may depend on the idle time before a step: the macro-steps call them."""
    sc = load_scenario(SCENARIOS / "chatbot.yaml", ["gpu=cpu-epyc-2core"])
    cost = build_parts(sc).cost
    fn = getattr(cost, "decode_time_fn", None)
    assert fn is None or fn(4, 4) is None


@pytest.mark.parametrize("scale", [0.0, 0.5, 2.0, 50.0])
@pytest.mark.parametrize("ranks", [1, 2])
def test_the_math_term_inline_is_step_time_s_float(scale, ranks) -> None:
    """Decode attention's math term (``_decode_math_s``), inlined in the fast path: the same float
    where reads bind (the term is 0.0), where the math binds, and at no KV at all."""
    import dataclasses

    base = build_parts(load_scenario(SCENARIOS / "azure-conv.yaml")).cost
    per_read = base.kv_read_s_per_token * base.decode_kv_reads
    cost = dataclasses.replace(base, decode_attn_s_per_pair=per_read * scale + 1e-15, attention_ranks=ranks)
    binds = 0
    for n in (1, 7, 64, 300):
        fn = cost.decode_time_fn(n, n)
        for kv in (0, 1, n, 999, 123_457, 3_999_999):
            shape = BatchShape(n, 0, n, kv, 0.0, 0, 0)
            assert fn(kv) == cost.step_time_s(shape, 0.0)
            binds += cost._decode_math_s(kv, kv * cost.decode_kv_reads * cost.kv_read_s_per_token / ranks) > 0.0
    assert (binds > 0) == (scale > 1.0), "the cases cover the math binding and not binding"

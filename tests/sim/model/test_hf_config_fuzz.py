"""Fuzz: random mutations of valid config.json files through ``sim kv --model FILE``.

Wrong types, zero / negative / huge / non-finite sizes, non-dividing heads, missing keys,
odd per-layer lists. Every case must end in exit 0 (a JSON report) or exit 2 with exactly
one ``error:`` line naming the file, and never a traceback.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli.main import main

FIXTURES = Path(__file__).parents[1] / "fixtures"
BASES = {
    "qwen2.5-7b": json.loads((FIXTURES / "qwen2.5-7b" / "config.json").read_text()),
    "deepseek-v2-lite": json.loads((FIXTURES / "deepseek-v2-lite.config.json").read_text()),
    "gemma-2-9b": json.loads((FIXTURES / "gemma-2-9b.config.json").read_text()),
    "qwen1.5-moe": json.loads((FIXTURES / "qwen1.5-moe-a2.7b.config.json").read_text()),
    "gemma-3-27b": json.loads((FIXTURES / "gemma-3-27b" / "config.json").read_text())["text_config"],
}
EXTRA_KEYS = ["layer_types", "sliding_window_pattern", "mlp_only_layers", "use_sliding_window",
              "max_window_layers", "num_experts", "num_local_experts", "head_dim", "text_config",
              "first_k_dense_replace", "shared_expert_intermediate_size", "kv_lora_rank"]
MAX_EXAMPLES = int(__import__("os").environ.get("KVSIM_FUZZ_EXAMPLES", "400"))

values = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([2**31, 2**63, 10**4000, 4097, 1 << 24, 1 << 30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 4096.0]),
    st.booleans(), st.none(), st.text(max_size=8),
    st.lists(st.sampled_from(["full_attention", "sliding_attention", "x", 1, -1, 0]), max_size=70),
    st.lists(st.integers(min_value=-2, max_value=70), max_size=5),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@st.composite
def mutated_configs(draw):
    base_name = draw(st.sampled_from(sorted(BASES)))
    cfg = dict(BASES[base_name])
    kinds = []
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        key = draw(st.sampled_from(sorted(cfg) + EXTRA_KEYS))
        kind = draw(st.sampled_from(["delete", "value", "heads", "model_type"]))
        kinds.append(kind)
        if kind == "delete":
            cfg.pop(key, None)
        elif kind == "heads":  # a head count that may not divide
            cfg[draw(st.sampled_from(["num_key_value_heads", "num_attention_heads", "hidden_size"]))] = draw(
                st.integers(min_value=1, max_value=200))
        elif kind == "model_type":
            cfg["model_type"] = draw(st.sampled_from(["llama", "gemma2", "gemma3_text", "qwen3_moe",
                                                      "deepseek_v3", "mixtral", "opt", "made_up", ""]))
        else:
            cfg[key] = draw(values)
    with_gpu = draw(st.booleans())
    return base_name, cfg, kinds, with_gpu


def test_mutated_configs_exit_0_or_one_error_line(tmp_path: Path, capsys) -> None:
    counts: Counter[str] = Counter()

    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(mutated_configs())
    def one_case(case) -> None:
        base_name, cfg, kinds, with_gpu = case
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        argv = ["kv", "--model", str(path), "--json"]
        if with_gpu:
            argv += ["--gpu", "h100-sxm", "--max-model-len", "4096"]
        rc = main(argv)
        out, err = capsys.readouterr()
        counts["cases"] += 1
        counts[f"exit {rc}"] += 1
        assert "Traceback" not in err and "Traceback" not in out
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        others = [line for line in err.splitlines() if not line.startswith(("error:", "warning:"))]
        assert not others, err
        if rc == 0:
            assert not errors and json.loads(out)["bytes_per_token"] > 0
        else:
            assert rc == 2, (rc, err)
            assert len(errors) == 1, err
            assert str(path) in errors[0] or (with_gpu and errors[0].startswith("error: <cli>: --")), errors[0]

    one_case()
    assert counts["cases"] >= MAX_EXAMPLES // 2
    with capsys.disabled():
        print(f"\nfuzzed config.json cases: {dict(counts)}")

"""The model's context (max_position_embeddings, stretched by YaRN or dynamic rope scaling as vLLM
derives it) bounds engine.max_model_len where the engine refuses a longer one at startup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.config.scenario import load_scenario
from sim.engine.parts import build_plan
from sim.errors import ConfigError
from sim.model.hf_config import derived_context_len, load_model

FIXTURES = Path(__file__).parents[1] / "fixtures"
CHATBOT = Path(__file__).parents[3] / "scenarios" / "chatbot.yaml"


@pytest.mark.parametrize("rope,max_pos,expected", [
    (None, 8192, 8192),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 32768, 131072),
    ({"type": "yarn", "factor": 4.0}, 32768, 131072),  # no original: from max_position_embeddings
    ({"rope_type": "dynamic", "factor": 2.0}, 4096, 8192),
    ({"rope_type": "llama3", "factor": 8.0}, 131072, 131072),  # Llama 3.1: already the context
    ({"rope_type": "linear", "factor": 8.0}, 131072, 131072),  # Gemma 3: already the context
    ({"rope_type": "longrope", "factor": 32.0}, 131072, 131072),
    ({"rope_type": "yarn", "factor": True}, 4096, 4096),  # nonsense factors are ignored
    ({"rope_type": "yarn", "factor": 1e9}, 4096, 4096),
    ({"rope_type": "yarn", "factor": 4.0, "mrope_section": [16, 24, 24]}, 32768, 32768),
])
def test_derived_context_length(rope, max_pos, expected) -> None:
    assert derived_context_len({} if rope is None else {"rope_scaling": rope}, max_pos) == expected


def test_a_config_with_yarn_allows_what_vllm_allows(tmp_path: Path) -> None:
    cfg = json.loads((FIXTURES / "qwen2.5-7b" / "config.json").read_text())
    assert load_model(str(FIXTURES / "qwen2.5-7b" / "config.json")).max_context_tokens == cfg["max_position_embeddings"]
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(str(tmp_path / "config.json")).max_context_tokens == 131072


@pytest.mark.parametrize("profile", ["vllm-v1", "vllm-v0", "sglang"])
def test_engines_that_check_refuse_a_max_model_len_past_the_context(profile) -> None:
    sc = load_scenario(CHATBOT, [f"engine.profile={profile}", "engine.max_model_len=8193"])  # Llama-3-8B: 8,192
    with pytest.raises(ConfigError) as e:
        build_plan(sc)
    assert e.value.key == "engine.max_model_len" and "8,193 is longer than llama-3-8b's context, 8,192" in e.value.message
    build_plan(load_scenario(CHATBOT, [f"engine.profile={profile}", "engine.max_model_len=8192"]))  # at it: fine
    build_plan(load_scenario(CHATBOT, [f"engine.profile={profile}", "engine.max_model_len=32768",
                                       "model=llama-3.1-8b"]))  # 128K context


@pytest.mark.parametrize("profile", ["trtllm", "eager"])
def test_engines_that_build_for_any_length_take_it(profile) -> None:
    build_plan(load_scenario(CHATBOT, [f"engine.profile={profile}", "engine.max_model_len=16384"]))


def test_the_cli_refusal_is_one_line(tmp_path: Path, capsys) -> None:
    assert main(["run", str(CHATBOT), "--set", "engine.max_model_len=200000", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {CHATBOT}: engine.max_model_len: 200,000 is longer")


def test_sim_kv_defaults_to_the_derived_context(tmp_path: Path, capsys) -> None:
    cfg = json.loads((FIXTURES / "qwen2.5-7b" / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert main(["kv", "--model", str(tmp_path / "config.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_model_len"] == 131072

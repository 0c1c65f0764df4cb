"""``sim models``, ``sim gpus`` and ``sim scenarios`` list what a scenario may name, with the figures
behind KV memory, and say which calibrations are measured."""

from __future__ import annotations

import json
from pathlib import Path

from sim.cli.main import main


def _json(capsys, command: str) -> list[dict]:
    assert main([command, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_models_list_every_preset_with_its_kv_bytes(capsys) -> None:
    from sim.model.hf_config import available_models

    rows = {r["name"]: r for r in _json(capsys, "models")}
    assert set(rows) == set(available_models())
    llama = rows["llama-3.1-8b"]  # 32 layers x 8 KV heads x 128 x (K, V) x 2 bytes
    assert llama["kv_bytes_per_token_bf16"] == 32 * 8 * 128 * 2 * 2 and llama["context_tokens"] == 131072
    assert rows["llama-3-8b"]["context_tokens"] == 8192 and 7.9 < llama["params_b"] < 8.1


def test_gpus_say_datasheet_or_measured(capsys) -> None:
    rows = {r["name"]: r for r in _json(capsys, "gpus")}
    assert rows["a100-80gb"]["source"] == "datasheet" and rows["a100-80gb"]["measured_kernels"] == []
    assert rows["h100-sxm@vllm"]["source"] == "measured" and "gemm" in rows["h100-sxm@vllm"]["measured_kernels"]
    assert rows["h100-sxm"]["memory_bandwidth_tb_s"] == 3.35


def test_scenarios_list_the_shipped_ones_with_the_command_to_run_them(capsys) -> None:
    rows = {r["name"]: r for r in _json(capsys, "scenarios")}
    assert rows["chatbot"]["command"] == "sim run chatbot" and rows["chatbot"]["description"]
    assert rows["plan-chatbot"]["command"].startswith("sim plan ")


def test_the_tables_print(capsys) -> None:
    for command in ("models", "gpus", "scenarios"):
        assert main([command]) == 0
    out = capsys.readouterr().out
    assert "llama-3.1-8b" in out and "h100-sxm@vllm" in out and "multiturn-offload" in out


def test_a_bad_flag_is_one_line(capsys) -> None:
    assert main(["gpus", "--bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "--bogus" in err[0]


def test_a_folder_named_like_a_shipped_scenario_does_not_hide_it(tmp_path, monkeypatch) -> None:
    from sim.config.shipped import resolve_scenario_path, shipped_scenarios_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "chatbot").mkdir()  # e.g. an earlier run's --out chatbot
    assert resolve_scenario_path("chatbot") == shipped_scenarios_dir() / "chatbot.yaml"
    (tmp_path / "mine").mkdir()  # no shipped scenario of that name: the folder itself, refused later
    assert resolve_scenario_path("mine") == Path("mine")
    (tmp_path / "chatbot.yaml").write_text("name: mine\n")  # a file of that name is the user's own
    assert resolve_scenario_path("chatbot.yaml").name == "chatbot.yaml"
    assert resolve_scenario_path("chatbot.yaml").parent == Path(".")

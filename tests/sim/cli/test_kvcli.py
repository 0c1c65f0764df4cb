"""`sim kv`: JSON acceptance figures, the plan with --gpu, errors name the flag."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.cli.kv import add_kv_parser, run_kv

FIXTURES = Path(__file__).parents[1] / "fixtures"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="sim")
    add_kv_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["kv", *argv])


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert run_kv(parse([*argv, "--json"])) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("model", "expected"), [
    ("qwen2.5-7b", 57344), ("llama-3-8b", 131072), ("llama-2-7b", 524288), ("llama-3-70b", 327680),
])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_json_acceptance_figures(capsys, model: str, expected: int, dtype: str) -> None:
    out = run_json(capsys, ["--model", model, "--kv-dtype", dtype])
    assert out["bytes_per_token"] == expected and out["bytes_per_block"] == 16 * expected


def test_json_for_mla_quantized_and_config_path(capsys) -> None:
    assert run_json(capsys, ["--model", "deepseek-v2-lite"])["bytes_per_token"] == 31104
    out = run_json(capsys, ["--model", "qwen2.5-7b", "--kv-dtype", "int8", "--block-size", "32"])
    assert out["bytes_per_token"] == 29568 and out["bytes_per_block"] == 32 * 29568
    assert out["quant_group_size"] == 64
    path = str(FIXTURES / "qwen2.5-7b" / "config.json")
    out = run_json(capsys, ["--model", path, "--max-model-len", "4096"])
    assert out["bytes_per_token"] == 57344 and out["bytes_per_seq"] == 4096 * 57344


def test_json_plan_with_gpu(capsys) -> None:
    out = run_json(capsys, ["--model", "llama-3-8b", "--gpu", "h100-sxm", "--max-model-len", "8192"])
    for key in ("weight_bytes", "activation_peak_bytes", "runtime_overhead_bytes", "kv_pool_bytes",
                "num_gpu_blocks", "pool_tokens", "max_full_length_seqs"):
        assert isinstance(out[key], int) and out[key] > 0, key
    assert out["pool_tokens"] == 16 * out["num_gpu_blocks"]
    assert out["max_full_length_seqs"] == out["num_gpu_blocks"] // 512
    assert out["bytes_per_seq"] == 8192 * 131072 and out["fits_one_sequence"] is True


def test_sliding_window_sequence_needs_only_the_window(capsys) -> None:
    out = run_json(capsys, ["--model", "mistral-7b", "--max-model-len", "32768"])
    assert out["max_kv_tokens_per_seq"] == 4096 and out["bytes_per_seq"] == 4096 * 131072


def test_table_output(capsys) -> None:
    assert run_kv(parse(["--model", "llama-3-8b", "--gpu", "a100-80gb"])) == 0
    text = capsys.readouterr().out
    for fragment in ("bytes per token", "131,072", "num_gpu_blocks", "KV pool", "full-length"):
        assert fragment in text


@pytest.mark.parametrize(("argv", "key", "fragment"), [
    (["--model", "gpt-5"], "--model", "unknown model 'gpt-5'"),
    (["--model", "llama-3-8b", "--kv-dtype", "fp4"], "--kv-dtype", "allowed: fp16, bf16, fp8, int8, int4"),
    (["--model", "llama-3-8b", "--block-size", "0"], "--block-size", "must be positive"),
    (["--model", "llama-3-8b", "--block-size", "x"], "--block-size", "expected an integer"),
    (["--model", "llama-3-8b", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization", "(0, 1.0]"),
    (["--model", "llama-3-8b", "--gpu", "tpu-v9"], "--gpu", "unknown GPU calibration"),
    (["--model", "qwen2.5-7b", "--gpu", "rtx-4060-8gb"], "--gpu-memory-utilization", "no memory left"),
])
def test_bad_input_raises_config_error_naming_the_flag(argv, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        run_kv(parse(argv))
    assert err.value.file == "<cli>" and err.value.key == key
    assert fragment in err.value.message

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
    (["--model", "llama-3-8b", "--attention-dp"], "--attention-dp", "give --tp 2, 4 or 8"),
    (["--model", "llama-3-8b", "--embedding-dtype", "fp5"], "--embedding-dtype", "allowed: fp32, bf16"),
    (["--model", "llama-3-8b", "--gpu", "h100-sxm", "--max-model-len", "8192", "--kv-cache-free-gpu-mem-fraction", "0"],
     "--kv-cache-free-gpu-mem-fraction", "(0, 1.0]"),
    (["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--max-model-len", "8192", "--kv-cache-free-gpu-mem-fraction",
      "0.9"], "--kv-cache-free-gpu-mem-fraction", "0.9 of what is free"),
])
def test_bad_input_raises_config_error_naming_the_flag(argv, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        run_kv(parse(argv))
    assert err.value.file == "<cli>" and err.value.key == key
    assert fragment in err.value.message


def test_weight_dtype_changes_weights_and_pool(capsys) -> None:
    base = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "8192"]
    bf16 = run_json(capsys, base)
    int4 = run_json(capsys, [*base, "--weight-dtype", "int4"])
    fp32 = run_json(capsys, [*base, "--weight-dtype", "fp32"])
    assert bf16["weight_dtype"] == "bf16" and bf16["weight_bytes"] == 2 * 8_030_261_248
    vocab = 128_256 * 4_096  # the embedding table and the lm_head each: 16-bit beside int4 layers
    assert int4["weight_bytes"] == (8_030_261_248 - 2 * vocab) // 2 + 2 * 2 * vocab
    assert int4["embedding_dtype"] == "bf16" and fp32["weight_bytes"] == 4 * 8_030_261_248
    gguf = run_json(capsys, [*base, "--weight-dtype", "int4", "--embedding-dtype", "int4"])
    assert gguf["weight_bytes"] == 8_030_261_248 // 2 and gguf["kv_pool_bytes"] > int4["kv_pool_bytes"]
    assert fp32["kv_pool_bytes"] < bf16["kv_pool_bytes"] < int4["kv_pool_bytes"]
    assert int4["num_gpu_blocks"] > bf16["num_gpu_blocks"]
    assert int4["bytes_per_token"] == bf16["bytes_per_token"]  # the KV dtype is separate


def test_moe_reports_total_and_active_parameters(capsys) -> None:
    out = run_json(capsys, ["--model", "qwen3-30b-a3b"])
    assert out["is_moe"] and out["num_params"] == 30_532_122_624
    assert out["num_active_params"] == 3_353_032_704 and out["weight_bytes"] == 2 * out["num_params"]
    assert run_kv(parse(["--model", "deepseek-v3"])) == 0
    text = capsys.readouterr().out
    assert "671.03 B total, 37.55 B active" in text


def test_per_layer_windows_exact_and_as_simulated(capsys) -> None:
    out = run_json(capsys, ["--model", "gemma-2-9b", "--gpu", "h100-sxm"])
    per_layer_token = 2 * 8 * 256 * 2
    assert out["attention_layers"] == [{"window": None, "layers": 21}, {"window": 4096, "layers": 21}]
    assert out["sliding_window"] is None and out["max_kv_tokens_per_seq"] == 8192
    assert out["bytes_per_seq"] == 21 * per_layer_token * (8192 + 4096)
    assert out["simulator_bytes_per_seq"] == 42 * per_layer_token * 8192
    assert out["max_full_length_seqs"] == out["kv_pool_bytes"] // out["bytes_per_seq"]
    assert out["simulator_max_full_length_seqs"] == out["num_gpu_blocks"] // 512
    assert out["max_full_length_seqs"] > out["simulator_max_full_length_seqs"]
    assert run_kv(parse(["--model", "gemma-3-12b", "--max-model-len", "32768"])) == 0
    text = capsys.readouterr().out
    assert "8 full, 40 sliding (1,024)" in text and "as `sim run` counts it" in text


def test_uniform_model_exact_equals_simulated(capsys) -> None:
    out = run_json(capsys, ["--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--max-model-len", "32768",
                            "--weight-dtype", "fp8"])
    assert out["bytes_per_seq"] == out["simulator_bytes_per_seq"] == 32768 * 327680
    assert out["max_full_length_seqs"] == out["simulator_max_full_length_seqs"]


def test_bad_weight_dtype_names_the_flag() -> None:
    with pytest.raises(ConfigError) as err:
        run_kv(parse(["--model", "llama-3-8b", "--weight-dtype", "fp6"]))
    assert err.value.key == "--weight-dtype"
    assert "allowed: fp32, bf16, fp16, fp8, int8, int4, fp4" in err.value.message


def test_bad_config_json_through_the_command_line(tmp_path, capsys) -> None:
    from sim.cli.main import main

    cfg = json.loads((FIXTURES / "qwen2.5-7b" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "num_key_value_heads": 3}))
    assert main(["kv", "--model", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: {path}: num_key_value_heads: must divide num_attention_heads (28), got 3"]


def test_attention_dp_holds_whole_tokens_per_gpu(capsys) -> None:
    base = ["--model", "deepseek-v3", "--weight-dtype", "fp8", "--gpu", "h200", "--tp", "8", "--max-model-len", "8192"]
    tp, dp = run_json(capsys, base), run_json(capsys, [*base, "--attention-dp"])
    assert dp["attention_data_parallel"] and not tp["attention_data_parallel"]
    assert dp["bytes_per_token_per_gpu"] == tp["bytes_per_token_per_gpu"]  # MLA's latent: one either way
    assert dp["weight_bytes_per_gpu"] > tp["weight_bytes_per_gpu"]  # the attention on every GPU
    assert dp["pool_tokens"] > 5 * tp["pool_tokens"]  # no latent repeated on 8 GPUs


def test_tensorrt_llms_free_fraction_sizes_the_pool(capsys) -> None:
    base = ["--model", "llama-3.1-70b", "--weight-dtype", "fp8", "--gpu", "h100-sxm", "--max-model-len", "8192"]
    vllm, trt = run_json(capsys, base), run_json(capsys, [*base, "--kv-cache-free-gpu-mem-fraction", "0.95"])
    assert vllm["kv_cache_free_gpu_mem_fraction"] is None and trt["kv_cache_free_gpu_mem_fraction"] == 0.95
    left = trt["gpu_memory_bytes"] - trt["weight_bytes"] - trt["activation_peak_bytes"] - trt["runtime_overhead_bytes"]
    assert trt["kv_pool_bytes"] == int(0.95 * left)
    assert trt["kv_pool_bytes"] > 3 * vllm["kv_pool_bytes"]  # 0.9 of the total leaves a 70B little


def test_help_lists_the_model_presets_and_gpus(capsys) -> None:
    # the help once said to provoke an error to see the list (issue #42)
    import pytest as _pytest

    from sim.calib.calibration import available_calibrations
    from sim.cli.main import main as sim_main
    from sim.model.hf_config import available_models

    with _pytest.raises(SystemExit) as exc:
        sim_main(["kv", "--help"])
    assert exc.value.code == 0
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, at hyphens too
    assert "seeerrormessage" not in text
    for name in (*available_models(), *available_calibrations()):
        assert name in text, name


def test_memory_accounting_flag_charges_the_old_vllm_non_torch(capsys) -> None:
    from sim.model.memory import DEFAULT_RUNTIME_OVERHEAD_BYTES, TOTAL_USED_RUNTIME_OVERHEAD_BYTES

    args = ["--model", "llama-3.1-8b", "--gpu", "rtx-3090", "--max-model-len", "4096"]
    new = run_json(capsys, args)
    old = run_json(capsys, [*args, "--memory-accounting", "total-used"])
    assert new["runtime_overhead_bytes"] == DEFAULT_RUNTIME_OVERHEAD_BYTES
    assert old["runtime_overhead_bytes"] == TOTAL_USED_RUNTIME_OVERHEAD_BYTES
    assert new["kv_pool_bytes"] - old["kv_pool_bytes"] == TOTAL_USED_RUNTIME_OVERHEAD_BYTES - DEFAULT_RUNTIME_OVERHEAD_BYTES
    assert old["num_gpu_blocks"] < new["num_gpu_blocks"]

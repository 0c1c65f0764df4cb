"""``sim kv``: KV cache bytes per token, per block and per sequence; with ``--gpu``, the pool.

Thin: parse, load and validate (ConfigError with source ``<cli>`` and the flag as key),
compute with sim.model.spec / sim.model.memory, print a rich table or one JSON object (``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from sim.cli.kv_offload import add_offload_args, offload_fields, offload_rows
from sim.errors import ConfigError
from sim.model.attention import attention_layers, is_mixed, kv_bytes_per_seq, simulator_bytes_per_seq
from sim.model.dtypes import DTYPE_BYTES, embedding_dtype
from sim.model.parallel import (
    check_pipeline_parallel, check_tensor_parallel, shard_model, stage_layers, stage_models,
    stage_weight_bytes)
from sim.model.spec import KVDtype, kv_bytes_per_token, max_kv_tokens_per_seq
from sim.model.weights import weight_bytes
from sim.model.hf_config import load_model
from sim.model.memory import MEMORY_ACCOUNTINGS

CLI = "<cli>"


def add_kv_parser(subparsers: Any) -> None:
    """Register the ``kv`` subcommand on an argparse subparsers object (sets func=run_kv)."""
    from sim.calib.calibration import available_calibrations  # noqa: PLC0415
    from sim.model.hf_config import available_models  # noqa: PLC0415

    p = subparsers.add_parser(
        "kv", help="KV cache bytes per token/block/sequence and, with --gpu, the KV pool",
        description="How much KV cache a model needs, and with --gpu how many blocks and "
                    "full-length requests fit (vLLM's startup arithmetic).",
        epilog=f"model presets: {', '.join(available_models())}. GPU calibrations: "
               f"{', '.join(available_calibrations())}.")
    p.add_argument("--model", required=True, metavar="NAME_OR_CONFIG",
                   help="a preset name (listed below) or a HuggingFace config.json")
    p.add_argument("--kv-dtype", default="bf16", metavar="|".join(d.value for d in KVDtype),
                   help="KV cache element type (default bf16; fp16 is the same size)")
    p.add_argument("--weight-dtype", default="bf16", metavar="|".join(DTYPE_BYTES),
                   help="weight element type (default bf16): the weights' memory, hence the KV pool")
    p.add_argument("--embedding-dtype", default=None, metavar="|".join(DTYPE_BYTES),
                   help="the embedding table and lm_head (default: bf16 under quantized weights, as FP8,"
                        " AWQ/GPTQ and NVFP4 checkpoints ship them; GGUF files quantize them too)")
    p.add_argument("--quant-group-size", default="64", metavar="N",
                   help="int8/int4: elements per scale (default 64)")
    p.add_argument("--block-size", default="16", metavar="N", help="tokens per KV block (default 16)")
    p.add_argument("--gpu", default=None, metavar="NAME_OR_CAL_YAML",
                   help="a calibration name (calibrations/NAME.yaml) or path: adds the memory plan")
    p.add_argument("--max-model-len", default=None, metavar="N",
                   help="longest sequence (default: the model's context, max_position_embeddings with rope_scaling, as vLLM derives it)")
    p.add_argument("--gpu-memory-utilization", default="0.9", metavar="F",
                   help="fraction of GPU memory vLLM may use (default 0.9)")
    p.add_argument("--kv-cache-free-gpu-mem-fraction", default=None, metavar="F",
                   help="TensorRT-LLM's KV sizing: this share of the memory left free after the weights and"
                        " activations (its default 0.9); replaces --gpu-memory-utilization")
    p.add_argument("--max-num-seqs", default="256", metavar="N", help="for the sampler's profiling (default 256)")
    p.add_argument("--max-num-batched-tokens", default="8192", metavar="N",
                   help="tokens of the profiling forward pass (default 8192)")
    p.add_argument("--tp", "--tensor-parallel-size", "-tp", dest="tp", default="1", metavar="N",
                   help="tensor-parallel size, 1, 2, 4 or 8 (default 1): the plan of each of N GPUs one replica"
                        " is split over (vLLM's --tensor-parallel-size, also accepted)")
    p.add_argument("--pp", "--pipeline-parallel-size", "-pp", dest="pp", default="1", metavar="N",
                   help="pipeline-parallel size, 1, 2, 4 or 8 (default 1): layers split into N stages (each on --tp"
                        " GPUs); the plan of each stage's GPUs (vLLM's --pipeline-parallel-size, also accepted)")
    p.add_argument("--memory-accounting", default=MEMORY_ACCOUNTINGS[0], choices=MEMORY_ACCOUNTINGS,
                   help="vLLM's non-torch count: increase (0.6.5+, V1; default) or total-used (0.2.5-0.6.4)")
    p.add_argument("--attention-dp", action="store_true",
                   help="with --tp N: the N GPUs run attention data-parallel (each its own requests' KV, all"
                        " attention heads; MLP, experts and vocabulary split): SGLang's --enable-dp-attention")
    add_offload_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run_kv)


def _number(value: str, flag: str, kind: type, *, upper: float | None = None) -> Any:
    try:
        x = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(CLI, flag, f"expected {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if not x > 0 or (upper is not None and x > upper) or not math.isfinite(x):
        allowed = f"in (0, {upper}]" if upper is not None else "positive"
        raise ConfigError(CLI, flag, f"must be {allowed}, got {value}")
    return x


def kv_report(args: argparse.Namespace) -> dict[str, Any]:
    """Everything ``sim kv`` prints, as a JSON-ready dict (sizes in bytes)."""
    try:
        kv_dtype = KVDtype(str(args.kv_dtype).lower())
    except ValueError:
        raise ConfigError(CLI, "--kv-dtype", f"got {args.kv_dtype!r}; allowed: "
                          f"{', '.join(d.value for d in KVDtype)}") from None
    weight_dtype = str(getattr(args, "weight_dtype", "bf16")).lower()
    if weight_dtype not in DTYPE_BYTES:
        raise ConfigError(CLI, "--weight-dtype", f"got {args.weight_dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
    embedding = getattr(args, "embedding_dtype", None)
    if embedding is not None and str(embedding).lower() not in DTYPE_BYTES:
        raise ConfigError(CLI, "--embedding-dtype", f"got {embedding!r}; allowed: {', '.join(DTYPE_BYTES)}")
    embedding = embedding_dtype(weight_dtype, None if embedding is None else str(embedding).lower())
    vocab_bytes = DTYPE_BYTES[embedding]
    group = _number(args.quant_group_size, "--quant-group-size", int)
    block_size = _number(args.block_size, "--block-size", int)
    util = _number(args.gpu_memory_utilization, "--gpu-memory-utilization", float, upper=1.0)
    free = getattr(args, "kv_cache_free_gpu_mem_fraction", None)
    free = None if free is None else _number(free, "--kv-cache-free-gpu-mem-fraction", float, upper=1.0)
    model = load_model(args.model, source=CLI, key="--model")
    tp = _number(getattr(args, "tp", "1"), "--tp", int)
    check_tensor_parallel(model, tp, CLI, "--tp")
    pp = _number(getattr(args, "pp", "1"), "--pp", int)
    check_pipeline_parallel(model, pp, CLI, "--pp")
    dp = bool(getattr(args, "attention_dp", False))
    if dp and tp == 1:
        raise ConfigError(CLI, "--attention-dp", "runs attention data-parallel over the --tp GPUs: give --tp 2, 4 or 8")
    shard = shard_model(model, tp, dp)  # one GPU's share (the model itself for --tp 1)
    max_model_len = (_number(args.max_model_len, "--max-model-len", int)
                     if args.max_model_len is not None else model.max_context_tokens)
    per_token = kv_bytes_per_token(model, kv_dtype, quant_group_size=group)
    per_block = math.ceil(per_token * block_size)
    out: dict[str, Any] = {
        "model": model.name, "kv_dtype": kv_dtype.value, "block_size": block_size,
        "quant_group_size": group if kv_dtype.has_group_scales else None,
        "bytes_per_token": per_token, "bytes_per_block": per_block,
        "is_mla": model.is_mla, "sliding_window": model.sliding_window,
        "attention_layers": attention_layers(model), "is_moe": model.is_moe,
        "num_params": model.num_params, "num_active_params": model.num_active_params,
        "weight_dtype": weight_dtype, "embedding_dtype": embedding,
        "weight_bytes": weight_bytes(model, DTYPE_BYTES[weight_dtype], vocab_bytes),
        "max_model_len": max_model_len, "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
        "attention_data_parallel": dp,
    }
    out |= offload_fields(args, per_block, block_size, tp)  # --offload-gb: a CPU tier (sim/cli/kv_offload.py)
    if pp > 1:
        out["stage_layers"] = list(stage_layers(model.num_layers, pp))
    if tp > 1 or pp > 1:  # per GPU: its share of the weights and of every token's KV (the largest stage's)
        shards = [shard_model(st, tp, dp) for st in stage_models(model, pp)]
        out |= {"weight_bytes_per_gpu": max(weight_bytes(shard, DTYPE_BYTES[weight_dtype], vocab_bytes) if pp == 1
                                            else stage_weight_bytes(sh, i, pp, DTYPE_BYTES[weight_dtype], vocab_bytes)
                                            for i, sh in enumerate(shards)),
                "kv_heads_per_gpu": None if model.is_mla else shard.num_kv_heads,
                "bytes_per_token_per_gpu": max(kv_bytes_per_token(sh, kv_dtype, quant_group_size=group)
                                               for sh in shards)}
    if max_model_len is not None:
        seq_tokens = max_kv_tokens_per_seq(model, max_model_len)
        blocks = math.ceil(seq_tokens / block_size)
        # exact: each layer capped at its window; the simulator keeps every layer's slot
        out |= {"max_kv_tokens_per_seq": seq_tokens, "blocks_per_seq": blocks,
                "bytes_per_seq": kv_bytes_per_seq(model, kv_dtype, max_model_len, block_size=block_size,
                                                  quant_group_size=group),
                "simulator_bytes_per_seq": simulator_bytes_per_seq(
                    model, kv_dtype, max_model_len, block_size=block_size, quant_group_size=group)}
    if args.gpu is not None:
        out |= _plan_fields(args, model, kv_dtype, group, block_size, util, max_model_len, weight_dtype, tp, pp,
                            vocab_bytes, dp, free)
        if is_mixed(model) and pp == 1:  # the plan counts every layer at full length: give the exact figures
            seq = kv_bytes_per_seq(shard, kv_dtype, max_model_len, block_size=block_size, quant_group_size=group)
            seqs = out["kv_pool_bytes"] // seq
            gpu_block = math.ceil(kv_bytes_per_token(shard, kv_dtype, quant_group_size=group) * block_size)
            out |= {"max_full_length_seqs": seqs, "fits_one_sequence": seqs >= 1,
                    "max_concurrency": out["num_gpu_blocks"] * gpu_block / seq}
    return out


def _plan_fields(args, model, kv_dtype, group, block_size, util, max_model_len, weight_dtype, tp,
                 pp=1, vocab_bytes=None, attention_dp=False, free=None) -> dict[str, Any]:
    from sim.calib.calibration import load_calibration  # noqa: PLC0415
    from sim.model.memory import plan_memory  # noqa: PLC0415

    if max_model_len is None:
        raise ConfigError(CLI, "--max-model-len", "required with --gpu: the model config has no "
                          "max_position_embeddings")
    cal = load_calibration(args.gpu, source=CLI, key="--gpu")
    try:
        plan = plan_memory(model, cal.memory_bytes, gpu_memory_utilization=util, block_size=block_size,
                           kv_dtype=kv_dtype, max_model_len=max_model_len, quant_group_size=group,
                           weight_dtype_bytes=DTYPE_BYTES[weight_dtype],
                           max_num_seqs=_number(args.max_num_seqs, "--max-num-seqs", int),
                           max_num_batched_tokens=_number(args.max_num_batched_tokens,
                                                          "--max-num-batched-tokens", int),
                           tensor_parallel_size=tp, pipeline_parallel_size=pp, embedding_bytes=vocab_bytes,
                           attention_data_parallel=attention_dp, source=CLI, kv_free_memory_fraction=free,
                           memory_accounting=args.memory_accounting)
    except ConfigError as exc:  # name the flag the user can change
        flag = {"tensor_parallel_size": "--tp", "pipeline_parallel_size": "--pp",
                "attention_data_parallel": "--attention-dp"}.get(
            exc.key, "--" + exc.key.replace("_", "-"))
        raise ConfigError(CLI, flag, exc.message) from None
    return {
        "gpu": cal.name, "gpu_name": cal.gpu_name, "gpu_memory_bytes": plan.gpu_memory_bytes,
        "gpu_memory_utilization": plan.gpu_memory_utilization,
        "kv_cache_free_gpu_mem_fraction": plan.kv_free_memory_fraction,
        "activation_peak_bytes": plan.activation_peak_bytes,
        "runtime_overhead_bytes": plan.runtime_overhead_bytes, "kv_pool_bytes": plan.kv_pool_bytes,
        "num_gpu_blocks": plan.num_gpu_blocks, "pool_tokens": plan.pool_tokens,
        "max_full_length_seqs": plan.max_full_length_seqs, "max_concurrency": plan.max_concurrency,
        "simulator_max_full_length_seqs": plan.max_full_length_seqs,
        "fits_one_sequence": plan.max_full_length_seqs >= 1,
        "total_kv_pool_bytes": plan.kv_pool_bytes * tp * pp,  # every GPU's pool (the binding stage's size)
    } | ({"stages": [{"layers": st.layers, "weight_bytes_per_gpu": st.weight_bytes,
                      "activation_peak_bytes": st.activation_peak_bytes, "kv_pool_bytes_per_gpu": st.kv_pool_bytes,
                      "bytes_per_token_per_gpu": st.bytes_per_token, "num_gpu_blocks": st.num_gpu_blocks}
                     for st in plan.stages]} if pp > 1 else {})


def _human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.2f} {unit} ({n:,.0f} B)"
    return f"{n:,} B"


def _print_table(r: dict[str, Any]) -> None:
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=f"KV cache: {r['model']} ({r['kv_dtype']}, block_size {r['block_size']})")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    rows = [("bytes per token", _human_bytes(r["bytes_per_token"])),
            ("bytes per block", _human_bytes(r["bytes_per_block"]))]
    groups = r["attention_layers"]
    if len(groups) > 1 or groups[0]["window"] is not None:
        rows.append(("attention layers", ", ".join(
            f"{g['layers']} full" if g["window"] is None else f"{g['layers']} sliding ({g['window']:,})"
            for g in groups)))
    if "bytes_per_seq" in r:
        seq = f"per max_model_len sequence ({r['max_model_len']:,} tokens"
        if r["max_kv_tokens_per_seq"] < r["max_model_len"]:
            seq += f", window {r['max_kv_tokens_per_seq']:,}"
        rows.append((seq + ")", _human_bytes(r["bytes_per_seq"])))
        if r["simulator_bytes_per_seq"] != r["bytes_per_seq"]:
            rows.append(("  as `sim run` counts it (no layer capped)",
                         _human_bytes(r["simulator_bytes_per_seq"])))
    params = f"{r['num_params'] / 1e9:,.2f} B"
    if r["is_moe"]:
        params += f" total, {r['num_active_params'] / 1e9:,.2f} B active per token"
    rows.append(("parameters", params))
    vocab = "" if r["embedding_dtype"] == r["weight_dtype"] else f"; embedding and lm_head {r['embedding_dtype']}"
    rows.append((f"weights ({r['weight_dtype']}, {DTYPE_BYTES[r['weight_dtype']]:g} bytes/param{vocab})",
                 _human_bytes(r["weight_bytes"])))
    tp = r["tensor_parallel_size"]
    gpu = " per GPU" if tp > 1 else ""
    if tp > 1 or r["pipeline_parallel_size"] > 1:
        dp = r["attention_data_parallel"]
        heads = ("one latent (MLA" + (")" if dp else ", replicated)") if r["kv_heads_per_gpu"] is None
                 else f"{r['kv_heads_per_gpu']}")
        rows += [("tensor parallel", f"{tp} GPUs, each holding its share of every layer" if not dp else
                  f"{tp} GPUs, attention data-parallel: each its own requests, all attention heads, 1/{tp} of"
                  " the MLP, experts and vocabulary")] * (tp > 1)
        rows += [("weights per GPU" + " (largest stage)" * (r["pipeline_parallel_size"] > 1),
                  _human_bytes(r["weight_bytes_per_gpu"])),
                 ("KV heads per GPU", heads),
                 ("bytes per token per GPU", _human_bytes(r["bytes_per_token_per_gpu"]))]
    pp = r["pipeline_parallel_size"]
    if pp > 1:  # pipeline parallelism: each stage's GPUs hold its layers (first: embedding, last: lm_head)
        rows.append(("pipeline parallel", f"{pp} stages of {', '.join(map(str, r['stage_layers']))} layers,"
                                          f" {tp * pp} GPUs"))
        for i, st in enumerate(r.get("stages", ())):
            rows.append((f"  stage {i} ({st['layers']} layers), per GPU",
                         f"weights {_human_bytes(st['weight_bytes_per_gpu'])}, KV pool "
                         f"{_human_bytes(st['kv_pool_bytes_per_gpu'])}, {st['num_gpu_blocks']:,} blocks"))
        gpu = " per GPU (binding stage)"
    if "num_gpu_blocks" in r:
        rows += [("GPU", f"{tp * pp} x " * (tp * pp > 1) + f"{r['gpu_name']} ({_human_bytes(r['gpu_memory_bytes'])})"),
                 (("gpu_memory_utilization", f"{r['gpu_memory_utilization']}")
                  if r.get("kv_cache_free_gpu_mem_fraction") is None else
                  ("kv_cache_free_gpu_mem_fraction", f"{r['kv_cache_free_gpu_mem_fraction']} of the memory left free")),
                 ("activation peak (estimate)" + gpu, _human_bytes(r["activation_peak_bytes"])),
                 ("runtime overhead" + gpu, _human_bytes(r["runtime_overhead_bytes"])),
                 ("KV pool" + gpu, _human_bytes(r["kv_pool_bytes"])),
                 ("num_gpu_blocks" + (" (all GPUs)" if r["attention_data_parallel"] else gpu),
                  f"{r['num_gpu_blocks']:,}")]
        if tp * pp > 1:
            rows.append(("KV pool, all GPUs", _human_bytes(r["total_kv_pool_bytes"])))
        whole = " (total: each GPU holds whole tokens of its own requests)"
        rows += [("pool tokens" + ((whole if r["attention_data_parallel"] else
                                    " (total: each GPU holds its heads of every token)") if tp > 1 else ""),
                  f"{r['pool_tokens']:,}"),
                 ("full-length requests at once", f"{r['max_full_length_seqs']:,}")]
        if r["simulator_max_full_length_seqs"] != r["max_full_length_seqs"]:
            rows.append(("  as `sim run` counts them", f"{r['simulator_max_full_length_seqs']:,}"))
    for name, value in rows + offload_rows(r, _human_bytes):
        table.add_row(name, value)
    console = Console()
    console.print(table)
    if r.get("fits_one_sequence") is False:
        console.print("[bold red]warning:[/] one max_model_len sequence does not fit: vLLM would refuse to start")


def run_kv(args: argparse.Namespace) -> int:
    """Print the report; return 0. Bad input raises ConfigError (the CLI prints it, exits 2)."""
    report = kv_report(args)
    if args.json:
        print(json.dumps(report))
    else:
        _print_table(report)
    return 0

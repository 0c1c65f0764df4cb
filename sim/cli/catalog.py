"""``sim models``, ``sim gpus``, ``sim scenarios``: what a scenario's ``model:`` and ``gpu:`` may
name, with the numbers that matter for KV memory, and the scenarios kvsim ships (``sim run NAME``)."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table


def add_catalog_parsers(sub) -> None:
    for name, help_text in (
            ("models", "list the model presets: layers, KV heads, context, KV bytes per token, parameters"),
            ("gpus", "list the GPU calibrations: memory, bandwidth, compute, and whether datasheet or measured"),
            ("scenarios", "list the shipped scenarios (run one by name: sim run chatbot)")):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def _model_rows() -> list[dict]:
    from sim.model.hf_config import available_models, load_model
    from sim.model.spec import kv_bytes_per_token

    rows = []
    for name in available_models():
        m = load_model(name)
        rows.append({"name": name, "layers": m.num_layers, "kv_heads": m.num_kv_heads, "head_dim": m.head_dim,
                     "context_tokens": m.max_context_tokens, "kv_bytes_per_token_bf16": kv_bytes_per_token(m, "bf16"),
                     "params_b": round(m.num_params / 1e9, 2)})
    return rows


def _gpu_rows() -> list[dict]:
    from sim.calib.calibration import available_calibrations, load_calibration

    rows = []
    for name in available_calibrations():
        c = load_calibration(name)
        rows.append({"name": name, "gpu_name": c.gpu_name, "source": str(c.source),
                     "memory_gib": round(c.memory_bytes / 2**30, 1),
                     "memory_bandwidth_tb_s": round(c.hbm_bandwidth_bytes_per_s / 1e12, 3),
                     "bf16_tflops": round(c.peak_flops / 1e12, 1),
                     "measured_kernels": sorted(c.kernels)})
    return rows


def _scenario_rows() -> list[dict]:
    from sim.config.shipped import available_scenarios, shipped_scenarios_dir
    from sim.errors import read_yaml_file

    rows = []
    for name in available_scenarios():
        data = read_yaml_file(shipped_scenarios_dir() / f"{name}.yaml") or {}
        kind = "plan" if "space" in data else "run"
        rows.append({"name": name, "command": f"sim {kind} {name}" if kind == "run" else
                     f"sim plan {shipped_scenarios_dir() / (name + '.yaml')}",
                     "description": str(data.get("description", "")).strip()})
    return rows


_COLUMNS = {
    "models": [("name", "model"), ("params_b", "params (B)"), ("layers", "layers"), ("kv_heads", "KV heads"),
               ("head_dim", "head dim"), ("context_tokens", "context"), ("kv_bytes_per_token_bf16", "KV B/token (bf16)")],
    "gpus": [("name", "gpu"), ("source", "source"), ("gpu_name", "device"), ("memory_gib", "memory GiB"),
             ("memory_bandwidth_tb_s", "memory TB/s"), ("bf16_tflops", "bf16 TFLOP/s")],
    "scenarios": [("name", "scenario"), ("description", "what it shows")],
}


def run_catalog(args) -> int:
    rows = {"models": _model_rows, "gpus": _gpu_rows, "scenarios": _scenario_rows}[args.command]()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title={"models": "model presets (model: NAME; or a path to a HuggingFace config.json, "
                                   "or its hub id for a preset: meta-llama/Llama-3.1-8B-Instruct)",
                         "gpus": "GPU calibrations (gpu: NAME; measured: microbench calibrate or import)",
                         "scenarios": "shipped scenarios (sim run NAME)"}[args.command])
    cols = _COLUMNS[args.command]
    for _, label in cols:
        table.add_column(label, overflow="fold")
    for r in rows:
        table.add_row(*("-" if r[k] is None else f"{r[k]:,}" if isinstance(r[k], int) else str(r[k]) for k, _ in cols))
    Console(file=sys.stdout, width=160).print(table)
    return 0

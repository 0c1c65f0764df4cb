"""``gqa_shared_kv_reads``: an engine whose decode attention reads a KV head once per query
head (TensorRT-LLM's masked MHA before XQA) pays the KV traffic times the query group."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from sim.calib.calibration import load_calibration
from sim.cli.main import main
from sim.config.scenario import load_scenario
from sim.cost.build import build_profiled_cost, decode_kv_reads
from sim.cost.profile import PROFILES
from sim.cost.shape import BatchShape
from sim.engine.parts import build_parts
from sim.model.hf_config import load_model

PER_HEAD = dataclasses.replace(PROFILES["trtllm"], gqa_shared_kv_reads=False)


@pytest.mark.parametrize("model, tp, reads", [
    ("llama-3-8b", 1, 4.0),  # 32 query heads over 8 KV heads
    ("llama-2-7b", 1, 1.0),  # multi-head attention: one query head per KV head
    ("llama-2-70b", 4, 8.0),  # 16 of the 64 query heads and 2 of the 8 KV heads on each GPU
    ("llama-2-70b", 8, 8.0),
    ("deepseek-v2-lite", 1, 1.0),  # MLA: one latent shared by every head
])
def test_the_reads_are_one_gpus_query_heads_per_kv_head(model, tp, reads) -> None:
    assert decode_kv_reads(load_model(model), PER_HEAD, tp) == reads
    assert decode_kv_reads(load_model(model), PROFILES["trtllm"], tp) == 1.0  # every profile shares by default


def test_only_decode_attention_pays_the_group() -> None:
    model, cal = load_model("llama-3-8b"), load_calibration("a100-80gb")
    shared = build_profiled_cost(model, cal, PROFILES["trtllm"], max_num_seqs=64)
    per_head = build_profiled_cost(model, cal, PER_HEAD, max_num_seqs=64)
    decode = BatchShape(32, 0, 32, 32 * 4000, 0.0, 0, 0)
    extra = per_head.device_time_s(decode) - shared.device_time_s(decode)
    r = shared.graph.kv_read_s_per_token
    assert extra == pytest.approx(3 * 32 * 4000 * r, rel=1e-9) and extra > 0
    prefill = BatchShape.prefill(2048, num_cached_tokens=1024)
    assert per_head.step_time_s(prefill) == shared.step_time_s(prefill)


def test_a_scenario_turns_it_off_and_the_run_slows(tmp_path) -> None:
    base = ["engine.profile=trtllm", "workload.num_requests=60"]
    off = [*base, "engine.profile_overrides.gqa_shared_kv_reads=false"]
    parts = build_parts(load_scenario("scenarios/chatbot.yaml", off))
    assert parts.cost.graph.decode_kv_reads == 4.0 and parts.cost.eager.decode_kv_reads == 4.0
    from sim.engine.logs.metrics import summarize
    from sim.engine.simulation import Simulation

    tpot = [summarize(Simulation(load_scenario("scenarios/chatbot.yaml", o)).run())["tpot_s"]["mean"]
            for o in (base, off)]
    assert tpot[1] > tpot[0]


def test_a_bad_value_is_one_line_naming_the_key(tmp_path, capsys) -> None:
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({"model": "tiny-llama", "gpu": "a100-80gb", "engine": {
        "max_model_len": 256, "profile_overrides": {"gqa_shared_kv_reads": "sometimes"}}}))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "engine.profile_overrides.gqa_shared_kv_reads" in err[0], err

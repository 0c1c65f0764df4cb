"""Every valid run drains with every request accounted for, on the surfaces added since the
first hardening: replicas behind each router, disaggregated prefill/decode pools, pipeline
stages, engine profiles, the CPU offload tier (and a disk tier below it), small KV pools that preempt and stall.

Random small scenarios go through ``sim run`` (in process, --no-report); each either is refused
with one error line (exit 2: an invalid combination) or exits 0 with arrived = completed +
rejected (each with a reason), nothing in flight and no ``stranded`` note. Found so far: a
disaggregated prefill replica that slept for good when its waiting prompts did not fit
(sim/engine/disagg/handoff.py wakes it now)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fuzzkit import error_parts, run_cli, write_yaml

TRIED: Counter = Counter()
REFUSED: Counter = Counter()  # by the key the error line names

PROFILES = ["vllm-v1", "vllm-v0", "sglang", "eager", "trtllm"]


@st.composite
def scenarios(draw) -> dict:
    profile = draw(st.sampled_from(PROFILES))
    topology = draw(st.sampled_from(["single", "cluster", "disagg", "pipeline"]))
    caching = draw(st.booleans())
    blocks = draw(st.sampled_from([None, 140, 300, 800]))  # 140: too few for 4096 tokens (refused), not 2048
    engine = {"profile": profile, "max_model_len": draw(st.sampled_from([2048, 4096]))}
    if blocks is not None:
        engine["num_gpu_blocks_override"] = blocks
    workload = {
        "num_requests": draw(st.integers(15, 50)),
        "arrival": draw(st.sampled_from([{"type": "poisson", "rate": 5.0}, {"type": "poisson", "rate": 40.0},
                                         {"type": "offline"}])),
        "prompt_tokens": {"type": "lognormal", "median": draw(st.sampled_from([100, 600, 1500])), "sigma": 0.6,
                          "max": 3000},
        "output_tokens": {"type": "lognormal", "median": draw(st.sampled_from([20, 150])), "sigma": 0.6, "max": 600},
    }
    if draw(st.booleans()):
        workload["shared_prefix"] = {"num_prefixes": 3, "prefix_tokens": 128}
    if workload["arrival"]["type"] != "offline" and draw(st.booleans()):
        workload["conversation"] = {"turns": {"type": "uniform", "low": 1, "high": 3}, "think_time_s": 0.5}
    data = {"name": "fuzz", "seed": draw(st.integers(0, 10_000)), "model": "llama-3-8b", "gpu": "a100-80gb",
            "engine": engine, "kv": {"prefix_caching": caching},
            "scheduler": {"policy": draw(st.sampled_from(["continuous", "chunked-prefill"])),
                          "preemption": draw(st.sampled_from(["recompute", "swap"]))},
            "workload": workload}
    if topology == "cluster":
        data["cluster"] = {"num_replicas": draw(st.integers(2, 4)),
                           "router": draw(st.sampled_from(["round-robin", "least-outstanding", "least-kv",
                                                           "prefix-aware", "cache-aware"]))}
    elif topology == "disagg":
        p, d = draw(st.integers(1, 2)), draw(st.integers(1, 2))
        data["cluster"] = {"num_replicas": p + d, "router": "least-outstanding", "disaggregation": {
            "prefill_replicas": p, "decode_replicas": d,
            "decode_router": draw(st.sampled_from(["least-kv", "least-outstanding"])),
            "kv_transfer": {"bandwidth_gbps": 100.0, "latency_s": 0.001,
                            "granularity": draw(st.sampled_from(["block", "layer"]))}}}
    elif topology == "pipeline":
        engine["pipeline_parallel_size"] = 2
    if topology == "single" and caching and draw(st.booleans()):
        cpu = {"tier": "cpu", "capacity_gb": draw(st.sampled_from([0.5, 4.0]))}
        disk = draw(st.sampled_from([None, 0.5, 8.0]))  # a disk tier below it, or none
        data["kv"]["offload"] = cpu if disk is None else [cpu, {"tier": "disk", "capacity_gb": disk}]
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=scenarios())
def test_every_valid_run_drains_with_every_request_accounted(data, tmp_path_factory, capsys) -> None:
    tmp = tmp_path_factory.mktemp("run")
    path = write_yaml(tmp / "s.yaml", data)
    code, err = run_cli(capsys, ["run", str(path), "--out", str(tmp / "out"), "--no-report", "--quiet",
                                 "--steps", "none"], "conservation: scenario", tmp / "out")
    if code == 2:  # one error line (run_cli checks it)
        TRIED["refused"] += 1
        REFUSED[error_parts(err)[1]] += 1
        return
    TRIED["ran"] += 1
    s = json.loads((tmp / "out" / "summary.json").read_text())
    r = s["requests"]
    assert r["arrived"] == r["completed"] + r["rejected"] + r["in_flight"]
    assert r["in_flight"] == 0, (r, s["notes"])
    assert sum(r["rejected_by_reason"].values()) == r["rejected"]
    assert not any(n.startswith("stranded") for n in s["notes"])
    for replica in s.get("replicas", []):
        q = replica["requests"]
        assert q["arrived"] == q["completed"] + q["rejected"] + q["in_flight"] and q["in_flight"] == 0, replica


@pytest.fixture(scope="module", autouse=True)
def _report_counts():
    yield
    print(f"\nconservation fuzz: {dict(TRIED)}; refused by key: {dict(REFUSED.most_common())}")

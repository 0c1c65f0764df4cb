"""A sweep point with replicas runs the cluster simulation (cluster.* keys are sweepable)."""

from __future__ import annotations

from sim.sweep.runner import run_point

DATA = {"name": "fleet", "seed": 3, "model": "tiny-llama", "gpu": "a100-80gb",
        "engine": {"profile": "eager", "max_model_len": 256, "num_gpu_blocks_override": 64},
        "cluster": {"num_replicas": 3, "router": "least-outstanding"},
        "workload": {"num_requests": 60, "arrival": {"type": "poisson", "rate": 300.0},
                     "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                     "output_tokens": {"type": "uniform", "low": 2, "high": 40}}}


def test_a_cluster_point_reports_every_replica() -> None:
    record = run_point("p0", {"cluster.num_replicas": 3}, DATA, "/tmp/kvsim-test/fleet.yaml")
    assert record["status"] == "ok", record.get("error")
    s = record["summary"]
    assert s["cluster"]["num_replicas"] == 3 and len(s["replicas"]) == 3
    assert sum(r["requests"]["arrived"] for r in s["replicas"]) == s["requests"]["arrived"] == 60
    single = run_point("p1", {}, {**DATA, "cluster": {"num_replicas": 1}}, "/tmp/kvsim-test/one.yaml")
    assert single["status"] == "ok" and "replicas" not in single["summary"]

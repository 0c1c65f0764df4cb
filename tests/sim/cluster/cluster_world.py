"""Helpers of the cluster tests (imported by name, like tests/report/cdp.py): small
scenarios, and running one as one engine or as a cluster."""

from __future__ import annotations

import copy

from sim.config.scenario import parse_scenario
from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation

#: Llama-3-8B on an A100-80GB with short prompts: steps of ~10 ms, a few thousand requests in seconds.
BASE = {
    "name": "cluster-test", "seed": 1, "model": "llama-3-8b", "gpu": "a100-80gb",
    "engine": {"max_model_len": 4096},
    "workload": {"num_requests": 400, "arrival": {"type": "poisson", "rate": 10.0},
                 "prompt_tokens": {"type": "lognormal", "median": 300, "sigma": 0.6, "max": 2000},
                 "output_tokens": {"type": "lognormal", "median": 100, "sigma": 0.6, "max": 500}},
}


#: Three replicas, prefix-aware, a multi-turn chat whose longest prompts exceed max_model_len.
CLUSTER = {**BASE, "engine": {"max_model_len": 1024}, "kv": {"prefix_caching": True},
           "cluster": {"num_replicas": 3, "router": "prefix-aware"},
           "workload": {**BASE["workload"], "num_requests": 120,
                        "prompt_tokens": {"type": "lognormal", "median": 300, "sigma": 0.8, "max": 2000},
                        "shared_prefix": {"num_prefixes": 8, "prefix_tokens": 128},
                        "conversation": {"turns": {"type": "uniform", "low": 1, "high": 3}, "think_time_s": 1.0}}}


def scenario(cluster: dict | None = None, **sections):
    """BASE with ``sections`` merged in (a dict merges into BASE's, anything else replaces)."""
    data = copy.deepcopy(BASE)
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    if cluster is not None:
        data["cluster"] = cluster
    return parse_scenario(data, "<test>")


def run(sc):
    """(summary, result): a cluster when the scenario has replicas, else one engine."""
    if sc.cluster.num_replicas > 1:
        result = ClusterSimulation(sc).run()
        return summarize_cluster(result), result
    result = Simulation(sc).run()
    return summarize(result), result

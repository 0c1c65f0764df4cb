"""summary.json of a pipeline-parallel run (sim/engine/pipeline.py).

The cluster summary (sim/engine/cluster.py ``summarize_cluster``) over the virtual engines,
which its ``replicas`` entries and the ``replica`` column of requests.csv and steps.csv stand
for, plus a ``parallel`` block:

- ``tensor_parallel_size``, ``pipeline_parallel_size``, ``gpus_per_replica`` (tp x pp);
- ``stage_layers`` (vLLM's split), ``form`` (``v0-virtual-engines``: what runs for every
  profile), ``virtual_engines`` and ``blocks_per_virtual_engine``;
- ``stages``: per stage its layers, weights and KV pool of one of its GPUs, and
  ``busy_share`` (its busy time over the simulated time);
- ``bubble_share``: idle stage time over stages x simulated time (1 - the mean busy share;
  it counts idle time for lack of requests too);
- ``batches``: batches run through the pipeline.

``engine.busy_s`` and ``engine.num_steps`` are sums over the virtual engines (a virtual
engine's step lasts from its schedule to its last stage's end, waits for stages included).
"""

from __future__ import annotations

from sim.engine.cluster import ClusterResult, summarize_cluster


def summarize_pipeline(result: ClusterResult) -> dict:
    """summary.json of a PipelineSimulation's result (module docstring)."""
    out = summarize_cluster(result)
    info = result.extra["pipeline"]
    plan, busy, span = info["plan"], info["stage_busy_s"], result.end_s
    pp, tp = plan.pipeline_parallel_size, plan.tensor_parallel_size
    shares = [b / span if span > 0 else 0.0 for b in busy]
    stages = [{"stage": i, "layers": st.layers, "weight_bytes_per_gpu": st.weight_bytes,
               "kv_pool_bytes_per_gpu": st.kv_pool_bytes, "kv_bytes_per_token_per_gpu": st.bytes_per_token,
               "busy_s": b, "busy_share": share}
              for i, (st, b, share) in enumerate(zip(plan.stages, busy, shares))]
    out["parallel"] = {
        "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "gpus_per_replica": tp * pp,
        "stage_layers": info["stage_layers"], "form": "v0-virtual-engines", "virtual_engines": pp,
        "blocks_per_virtual_engine": plan.num_gpu_blocks // pp, "batches": info["batches"],
        "bubble_share": 1.0 - sum(shares) / pp if span > 0 else 0.0, "stages": stages,
    }
    out["notes"].append(
        f"pipeline_parallel_size {pp}: `replicas` (and the replica column of requests.csv and steps.csv) are the"
        f" engine's {pp} virtual engines (vLLM V0: a scheduler and 1/{pp} of the KV blocks each) sharing the"
        " stages, not separate model copies; see `parallel`")
    wall = out.pop("sim_wall_s")
    out["sim_wall_s"] = wall  # last, as in a single engine's summary
    return out


__all__ = ["summarize_pipeline"]

"""summary.json of a pipeline-parallel run (sim/engine/pipeline/simulation.py), in any form.

**Batch queue** (vLLM V1, sim/engine/pipeline/batch_queue.py): a single engine's summary
(sim/engine/logs/metrics.py ``summarize``: one scheduler, one pool) plus the ``parallel`` block
below with ``form`` ``batch-queue``, ``max_batches_in_flight`` (pp),
``peak_batches_in_flight`` and ``num_gpu_blocks`` (the one pool). ``engine.num_steps``
counts batches; ``engine.busy_s`` is the time at least one batch was in flight.

**Virtual engines** (vLLM V0): the cluster summary (sim/engine/cluster/simulation.py
``summarize_cluster``) over the virtual engines, which its ``replicas`` entries and the
``replica`` column of requests.csv and steps.csv stand for, plus a ``parallel`` block.

The ``parallel`` block:

- ``tensor_parallel_size``, ``pipeline_parallel_size``, ``gpus_per_replica`` (tp x pp),
  ``num_replicas`` (model copies: 1 but for replicas of the batch queue) and ``gpus`` (all of them);
- ``stage_layers`` (vLLM's split), ``form`` (``virtual-engines`` or ``batch-queue``) and
  ``form_from`` (``engine.pipeline_mode``, or the profile whose default it is); for virtual
  engines ``virtual_engines`` and ``blocks_per_virtual_engine``;
- ``stages``: per stage its layers, weights and KV pool of one of its GPUs, and
  ``busy_share`` (its busy time over the simulated time);
- ``bubble_share``: idle stage time over stages x simulated time (1 - the mean busy share;
  it counts idle time for lack of requests too);
- ``batches``: batches run through the pipeline.

**Replicas of the batch queue** (``cluster.num_replicas`` N > 1, sim/engine/pipeline/cluster.py):
the cluster summary (``summarize_cluster``: per-replica entries, totals), its ``cluster``
block with ``gpus`` (N x tp x pp); a ``parallel`` block over the whole (as the batch
queue's, with ``num_replicas``, ``gpus``, ``num_gpu_blocks_per_replica``, ``batches`` summed,
stage ``busy_s`` summed and ``busy_share`` / ``bubble_share`` the means over replicas,
``peak_batches_in_flight`` the largest), and in each ``replicas`` entry a ``parallel``
block of its own stages (``stages``: ``busy_s``, ``busy_share``; ``bubble_share``,
``batches``, ``peak_batches_in_flight``).

With virtual engines, the ``cluster`` block is the one replica's: ``num_replicas`` 1, ``router`` least-outstanding without
sticky sessions (vLLM V0 places a request on the virtual engine with the fewest unfinished).
report.html and the terminal table call the ``replicas`` entries "virtual engine i (stage
pipeline)" (sim/outputs/report.py, table.py).

``engine.busy_s`` and ``engine.num_steps`` are sums over the virtual engines (a virtual
engine's step lasts from its schedule to its last stage's end, waits for stages included).
"""

from __future__ import annotations

from sim.engine.cluster.simulation import ClusterResult, summarize_cluster
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import SimResult


def _parallel(result, form: str) -> dict:
    """The ``parallel`` block both forms share (module docstring)."""
    info, eng = result.extra["pipeline"], result.scenario.engine
    plan, busy, span = info["plan"], info["stage_busy_s"], result.end_s
    pp, tp = plan.pipeline_parallel_size, plan.tensor_parallel_size
    shares = [b / span if span > 0 else 0.0 for b in busy]
    stages = [{"stage": i, "layers": st.layers, "weight_bytes_per_gpu": st.weight_bytes,
               "kv_pool_bytes_per_gpu": st.kv_pool_bytes, "kv_bytes_per_token_per_gpu": st.bytes_per_token,
               "busy_s": b, "busy_share": share}
              for i, (st, b, share) in enumerate(zip(plan.stages, busy, shares))]
    return {
        "tensor_parallel_size": tp, "pipeline_parallel_size": pp, "gpus_per_replica": tp * pp,
        "num_replicas": 1, "gpus": tp * pp,  # one model copy (replicas of the batch queue: N, N x tp x pp)
        "stage_layers": info["stage_layers"], "form": form,
        "form_from": "engine.pipeline_mode" if eng.pipeline_mode is not None else f"profile {eng.profile}",
        "batches": info["batches"], "bubble_share": 1.0 - sum(shares) / pp if span > 0 else 0.0, "stages": stages,
    }


def _summarize_batch_queue(result: SimResult) -> dict:
    out = summarize(result)
    info, plan = result.extra["pipeline"], result.plan
    pp = plan.pipeline_parallel_size
    par = _parallel(result, "batch-queue")
    par.update(max_batches_in_flight=pp, peak_batches_in_flight=info["peak_batches_in_flight"],
               num_gpu_blocks=plan.num_gpu_blocks)
    out["parallel"] = par
    out["notes"].append(
        f"pipeline_parallel_size {pp}: vLLM V1's batch queue: one scheduler and one KV pool of"
        f" {plan.num_gpu_blocks:,} blocks, up to {pp} batches in flight through the stages; engine.num_steps"
        " counts batches and engine.busy_s the time a batch was in flight; see `parallel`")
    wall = out.pop("sim_wall_s")
    out["sim_wall_s"] = wall  # last, as in a single engine's summary
    return out


def _summarize_batch_queue_cluster(result: ClusterResult) -> dict:
    """Replicas of a batch-queue engine (sim/engine/pipeline/cluster.py): the cluster's summary,
    a ``parallel`` block over the whole (stage busy shares: means over replicas) and one in
    each ``replicas`` entry (its own stages)."""
    out = summarize_cluster(result)
    n = len(result.replicas)
    per = [_parallel(r, "batch-queue") for r in result.replicas]
    whole = dict(per[0])  # the settings every replica shares; the figures follow
    tp, pp, plan = whole["tensor_parallel_size"], whole["pipeline_parallel_size"], result.replicas[0].plan
    busy = [sum(p["stages"][i]["busy_s"] for p in per) for i in range(pp)]
    whole["stages"] = [{**st, "busy_s": b, "busy_share": sum(p["stages"][i]["busy_share"] for p in per) / n}
                       for i, (st, b) in enumerate(zip(whole["stages"], busy))]
    whole.update(
        num_replicas=n, gpus=n * tp * pp, batches=sum(p["batches"] for p in per),
        bubble_share=sum(p["bubble_share"] for p in per) / n, max_batches_in_flight=pp,
        peak_batches_in_flight=max(r.extra["pipeline"]["peak_batches_in_flight"] for r in result.replicas),
        num_gpu_blocks_per_replica=plan.num_gpu_blocks)
    out["parallel"] = whole
    out["cluster"]["gpus"] = n * tp * pp
    for entry, p, r in zip(out["replicas"], per, result.replicas):
        entry["parallel"] = {"batches": p["batches"], "bubble_share": p["bubble_share"],
                             "peak_batches_in_flight": r.extra["pipeline"]["peak_batches_in_flight"],
                             "stages": [{k: st[k] for k in ("stage", "busy_s", "busy_share")} for st in p["stages"]]}
    out["notes"].append(
        f"pipeline_parallel_size {pp}: {n} replicas, each vLLM V1's batch queue on its own {pp} stages of {tp} GPU(s)"
        f" (one scheduler and one KV pool of {plan.num_gpu_blocks:,} blocks, up to {pp} batches in flight):"
        f" {n} x {tp} x {pp} = {n * tp * pp} GPUs; see `parallel` and each replica's `parallel`")
    wall = out.pop("sim_wall_s")
    out["sim_wall_s"] = wall  # last, as in a single engine's summary
    return out


def summarize_pipeline(result: ClusterResult | SimResult) -> dict:
    """summary.json of a PipelineSimulation's result, any form (module docstring)."""
    if isinstance(result, SimResult):
        return _summarize_batch_queue(result)
    if result.extra["pipeline"].get("form") == "batch-queue":  # replicas (sim/engine/pipeline/cluster.py)
        return _summarize_batch_queue_cluster(result)
    out = summarize_cluster(result)
    plan = result.extra["pipeline"]["plan"]
    pp = plan.pipeline_parallel_size
    out["parallel"] = _parallel(result, "virtual-engines")
    out["parallel"].update(virtual_engines=pp, blocks_per_virtual_engine=plan.num_gpu_blocks // pp)
    out["engine"]["gpus"] = plan.tensor_parallel_size * pp  # the virtual engines share one model copy
    # the engine's own router over its virtual engines (sim/engine/pipeline/simulation.py), not the scenario's cluster keys
    out["cluster"].update(router="least-outstanding", sticky_sessions=False)
    out["notes"].append(
        f"pipeline_parallel_size {pp}: `replicas` (and the replica column of requests.csv and steps.csv) are the"
        f" engine's {pp} virtual engines (vLLM V0: a scheduler and 1/{pp} of the KV blocks each) sharing the"
        " stages, not separate model copies; see `parallel`")
    wall = out.pop("sim_wall_s")
    out["sim_wall_s"] = wall  # last, as in a single engine's summary
    return out


def virtual_engines(s: dict) -> int:
    """How many virtual engines a summary's ``replicas`` are: pp for a pipeline-parallel run, else 0."""
    par = s.get("parallel") or {}
    return int(par.get("virtual_engines", 0)) if par.get("pipeline_parallel_size", 1) > 1 else 0


def replica_label(s: dict, entry: dict) -> str:
    """A ``replicas`` entry's name in report.html and the terminal table: ``replica i``, with its
    pool's role when disaggregated, or ``virtual engine i (stage pipeline)`` in a pipeline run."""
    if virtual_engines(s):
        return f"virtual engine {entry['replica']} (stage pipeline)"
    return f"replica {entry['replica']}" + (f" ({entry['role']})" if "role" in entry else "")


def pipeline_title(s: dict) -> str:
    """One line on a pipeline run's virtual engines and stages (report.html, the terminal table)."""
    par = s["parallel"]
    stages = "; ".join(f"stage {st['stage']}: {st['layers']} layers, busy {st['busy_share']:.0%}"
                       for st in par["stages"])
    return (f"{par['virtual_engines']} virtual engines (vLLM V0: a scheduler and "
            f"{par['blocks_per_virtual_engine']:,} KV blocks each, requests to the one with the fewest unfinished)"
            f" sharing {par['pipeline_parallel_size']} stages of {par['tensor_parallel_size']} GPU(s) each"
            f" ({stages}; bubbles {par['bubble_share']:.0%}), one model copy on {par['gpus_per_replica']} GPUs")


__all__ = ["pipeline_title", "replica_label", "summarize_pipeline", "virtual_engines"]

"""summary.json's figures of a disaggregated cluster (sim/engine/disagg/handoff.py): the pools'
totals and the KV transfer's, under ``cluster.disaggregation``.

Requests are counted per pool: a prefill replica counts the prefill copies routed to it
(completed once their KV has landed on a decode replica), a decode replica the requests
handed to it (from the moment it was picked, blocks pending included). So over the run
``prefill arrived = cluster arrived``, ``prefill rejected = cluster rejected``, ``decode
arrived = prefill completed + hand-offs under way``, ``decode completed = cluster completed``.
"""

from __future__ import annotations

import numpy as np

_COUNTS = ("arrived", "completed", "rejected", "in_flight")


def _quantiles(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "p50": None, "p99": None}
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99))}


def _share(busy: list[float], end_s: float) -> dict:
    shares = [b / end_s if end_s > 0 else 0.0 for b in busy]
    return {"mean": sum(shares) / len(shares), "max": max(shares)}


def disaggregation_summary(result, per: list[dict]) -> dict:
    """The ``cluster.disaggregation`` block of summary.json (``per``: each replica's summary)."""
    dis, h = result.scenario.cluster.disaggregation, result.handoff
    pools = {}
    for role, replicas in (("prefill", h.prefill), ("decode", h.decode)):
        idx = [r.index for r in replicas]
        parts = replicas[0].parts
        pools[role] = {
            "replicas": len(idx),
            "tensor_parallel_size": parts.sc.engine.tensor_parallel_size,
            "gpus": len(idx) * parts.sc.engine.tensor_parallel_size,
            "profile": str(parts.sc.engine.profile), "batching": str(parts.sc.scheduler.policy),
            "requests": {k: sum(per[i]["requests"][k] for i in idx) for k in _COUNTS},
            "kv_pool_tokens_per_replica": per[idx[0]]["kv"]["pool_tokens"],
            "busy_share_mean": sum(per[i]["engine"]["busy_s"] for i in idx) / len(idx) / result.end_s
            if result.end_s > 0 else 0.0,
        }
    st, sizing, link = h.stats, h.sizing, dis.kv_transfer
    return {
        "prefill_replicas": dis.prefill_replicas, "decode_replicas": dis.decode_replicas,
        "decode_router": str(dis.decode_router),
        "pools": pools,
        "kv_transfer": {
            "granularity": str(link.granularity), "bandwidth_gbps": link.bandwidth_gbps, "latency_s": link.latency_s,
            "contention": "one resource per replica NIC; a transfer holds the prefill's, then the decode's",
            "transfers": st.transfers, "blocks_moved": st.blocks, "bytes_moved": st.bytes,
            "bytes_per_block_per_gpu": sizing.bytes_per_block_gpu,
            "link_s": _quantiles(st.link_s),  # holding both NICs
            "handoff_s": _quantiles(st.handoff_s),  # first token -> the request decoding on its decode replica
            "waited_for_decode_blocks": st.alloc_waits,
            "in_flight": len(h._copies) - _queued_at_prefill(h),  # past their first token, KV not landed
            "link_busy_share": {
                "prefill_nics": _share([h.nic_busy_s[id(r)] for r in h.prefill], result.end_s),
                "decode_nics": _share([h.nic_busy_s[id(r)] for r in h.decode], result.end_s)},
        },
    }


def _queued_at_prefill(h) -> int:
    """Prefill copies not yet at their first token (still in a prefill scheduler or front end)."""
    return sum(1 for hand in h._copies.values() if hand.copy.num_generated == 0)


def prefill_pool_hit_rate(result) -> float | None:
    """The prefix cache's hit rate over the prefill pool (the prefill work it saved)."""
    stats = [r.allocator.prefix_cache_stats() for r in result.handoff.prefill]
    queried = sum(s.queried_tokens for s in stats)
    return sum(s.hit_tokens for s in stats) / queried if stats[0].enabled and queried else None

"""summary.json's ``kv_offload`` section: what a CPU tier (sim/kv/offload.py) held and moved.

Present only when the scenario sets ``kv.offload``. The TTFT the tier buys shows in the
run's own ``ttft_s`` (run the scenario with ``--set kv.offload=null`` for the baseline).
"""

from __future__ import annotations


def tier_summary(sc, allocator, span_s: float) -> dict | None:
    """``span_s``: the run's simulated seconds (the link's busy shares are of it)."""
    tier = getattr(allocator, "tier", None)
    if tier is None:
        return None
    spec, B = tier.spec, allocator.block_size
    looked = tier.num_lookup_blocks
    return {
        "tier": sc.kv.offload.tier, "store": sc.kv.offload.store, "eviction": sc.kv.offload.eviction,
        "capacity_blocks": tier.capacity_blocks, "capacity_tokens": tier.capacity_blocks * B,
        "capacity_bytes": tier.capacity_blocks * spec.block_bytes,
        "bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s, "latency_s": spec.latency_s,
        "lookups": tier.num_lookups,  # admissions that looked past their GPU hits
        "lookup_tokens": looked * B,
        "hit_tokens": tier.num_hit_blocks * B,  # prefill tokens loaded instead of computed
        "hit_rate": tier.num_hit_blocks / looked if looked else 0.0,
        "loads": tier.num_loads,
        "blocks_stored": tier.num_stored, "blocks_evicted": tier.num_evicted,
        "stores_skipped_full_of_pinned": tier.num_store_skipped,
        "bytes_stored": tier.bytes_stored, "bytes_loaded": tier.bytes_loaded,
        "store_link_busy_s": tier.store_busy_s,  # device -> host, asynchronous
        "load_link_busy_s": tier.load_busy_s,  # host -> device, on the host link with swaps
        "link_busy_s": tier.store_busy_s + tier.load_busy_s,
        # near 1: that direction of the link would be saturated (stores are not queued: #43's notes)
        "store_link_busy_fraction": tier.store_busy_s / span_s, "load_link_busy_fraction": tier.load_busy_s / span_s,
        "resident_blocks_end": tier.num_resident, "peak_resident_blocks": tier.peak_resident,
        "host_memory_peak_bytes": tier.peak_resident * spec.block_bytes,
    }

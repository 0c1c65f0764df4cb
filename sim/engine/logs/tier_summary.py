"""summary.json's ``kv_offload`` section: what the lower tiers (sim/kv/offload.py) held and moved.

Present only when the scenario sets ``kv.offload``. One CPU tier: its figures. A CPU tier and
a disk tier: the figures of the whole (lookups, hits, the host link) and ``tiers``, each
tier's own by name. The TTFT the tiers buy shows in the run's own ``ttft_s`` (run the scenario with
``--set kv.offload=null`` for the baseline).
"""

from __future__ import annotations

from sim.config.offload_schema import offload_tiers


def tier_summary(sc, allocator, span_s: float) -> dict | None:
    """``span_s``: the run's simulated seconds (the link's busy shares are of it)."""
    tier = getattr(allocator, "tier", None)
    if tier is None:
        return None
    spec, B = tier.spec, allocator.block_size
    looked = tier.num_lookup_blocks
    cpu, *lower = offload_tiers(sc.kv.offload)
    out = {
        "tier": cpu.tier, "store": cpu.store, "eviction": cpu.eviction,
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
    if spec.warm:  # ``warm: true``: blocks a warm-up run would have left in the tier
        out["blocks_warmed"] = tier.num_warmed
    if not lower or tier.lower is None:
        return out
    return _tiered(out, tier, tier.lower, B, span_s)


def _tiered(whole: dict, cpu, disk, B: int, span_s: float) -> dict:
    """A CPU tier over a disk tier: the whole's figures (the host link carries both tiers' hits)
    and each tier's hits and traffic on its own medium."""
    cpu_hits = cpu.num_hit_blocks - disk.num_hit_blocks
    host = {k: whole[k] for k in ("tier", "store", "eviction", "capacity_blocks", "capacity_tokens",
                                  "capacity_bytes", "bandwidth_bytes_per_s", "latency_s")}
    host.update({"hit_tokens": cpu_hits * B, "blocks_stored": cpu.num_stored, "blocks_evicted": cpu.num_evicted,
                 "blocks_demoted": cpu.num_demoted, "bytes_stored": cpu.bytes_stored,
                 "store_busy_s": cpu.store_busy_s, "resident_blocks_end": cpu.num_resident,
                 "peak_resident_blocks": cpu.peak_resident})
    spec = disk.spec
    below = {"tier": "disk", "capacity_blocks": disk.capacity_blocks, "capacity_tokens": disk.capacity_blocks * B,
             "capacity_bytes": disk.capacity_blocks * spec.block_bytes,
             "read_bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s,
             "write_bandwidth_bytes_per_s": spec.write_bandwidth_bytes_per_s, "latency_s": spec.latency_s,
             "hit_tokens": disk.num_hit_blocks * B, "reads": disk.num_loads, "bytes_read": disk.bytes_loaded,
             "read_busy_s": disk.load_busy_s, "read_busy_fraction": disk.load_busy_s / span_s,
             "blocks_written": disk.num_stored, "bytes_written": disk.bytes_stored,
             "write_busy_s": disk.store_busy_s, "write_busy_fraction": disk.store_busy_s / span_s,
             "read_wait_s": disk.read_wait_s,  # reads queued behind the drive's writes and other reads
             "blocks_evicted": disk.num_evicted, "blocks_moved_up": disk.num_superseded,
             "writes_skipped_full_of_pinned": disk.num_store_skipped,
             "resident_blocks_end": disk.num_resident, "peak_resident_blocks": disk.peak_resident}
    whole = dict(whole, tier="cpu+disk")
    for key in ("store", "eviction", "capacity_blocks", "capacity_tokens", "capacity_bytes", "bandwidth_bytes_per_s",
                "latency_s", "blocks_stored", "blocks_evicted", "stores_skipped_full_of_pinned",
                "resident_blocks_end", "peak_resident_blocks"):
        del whole[key]
    # loads, bytes_loaded, load_link_busy_s: the host-to-device copies (a disk hit crosses host memory)
    whole["tiers"] = {"cpu": host, "disk": below}
    return whole

"""A cluster's ``kv_offload`` section (#43): each replica has its own CPU tier (and disk), in its
own host's memory, so the cluster's figures are the replicas' summed (counts, bytes, link
seconds, residency), their settings as configured, the shares recomputed from the sums
(``hit_rate``) or the busiest replica's (a link's or a drive's busy fraction is its own)."""

from __future__ import annotations

#: Per-tier settings (the same on every replica): kept as they are.
_SETTINGS = {"tier", "store", "eviction", "bandwidth_bytes_per_s", "read_bandwidth_bytes_per_s",
             "write_bandwidth_bytes_per_s", "latency_s"}


def _combine(parts: list[dict]) -> dict:
    out: dict = {}
    for key, first in parts[0].items():
        values = [p[key] for p in parts]
        if isinstance(first, dict):
            out[key] = _combine(values)
        elif key in _SETTINGS or not isinstance(first, (int, float)) or isinstance(first, bool):
            out[key] = first
        elif key.endswith("_fraction"):
            out[key] = max(values)  # the busiest replica's link or drive
        else:
            out[key] = sum(values)
    if "hit_rate" in out:
        out["hit_rate"] = out["hit_tokens"] / out["lookup_tokens"] if out.get("lookup_tokens") else 0.0
    return out


def cluster_tier_summary(per: list[dict]) -> dict | None:
    """The cluster's ``kv_offload`` from its replicas' summaries (None without a tier)."""
    parts = [s["kv_offload"] for s in per if "kv_offload" in s]
    return _combine(parts) if parts else None

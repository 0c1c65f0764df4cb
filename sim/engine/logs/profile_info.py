"""What summary.json says about the engine profile a run modelled (sim/cost/profile.py)."""

from __future__ import annotations


def engine_summary(result) -> dict:
    """The engine profile the run modelled (sim/cost/profile.py) and whose times the
    latencies are: the client's (through a modelled front end) or the engine's."""
    p = result.profile
    return {"profile": str(p.name), "graph_mode": str(p.graph_mode), "async_scheduling": p.async_scheduling,
            "prefill_first": p.prefill_first, "step_host_s": p.step_host_s, "seq_host_s": p.seq_host_s,
            "gqa_shared_kv_reads": p.gqa_shared_kv_reads, "reserve_full_length": p.reserve_full_length,
            "graph_kernel_s": p.graph_kernel_s,
            "entrypoint": str(result.scenario.engine.entrypoint), "api_servers": result.scenario.engine.api_servers,
            "latencies_seen_by": "client" if p.has_frontend else "engine"}


def profile_notes(result) -> list[str]:
    p = result.profile
    if p.is_eager or result.calibration_source != "measured":
        return []
    if getattr(result, "kernel_timing", "engine") == "device":
        return [f"engine profile {p.name}: the calibration's kernels are GPU times alone (kernel_timing: device), so "
                "the profile's host time, graph replays and batch padding are applied around them"]
    return [f"engine profile {p.name}: a measured calibration times the validation engine's own steps "
            "(launches and host work included), so its graph replay and host-time numbers are not applied; "
            "scheduling defaults and the front end are"]

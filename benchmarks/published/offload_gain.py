"""The ``offload_gain`` family's metrics: what a KV offload tier (``kv.offload``, #43) buys.

A published offload result is a ratio: the same workload run with the tier and without it
(vLLM's offloading connector blog: "loading KV values from the CPU reduces TTFT by X2-X22",
"throughput increases by up to X9"). A case of this family states the run *with* the tier;
the runner simulates it twice, as stated and with ``kv.offload: null`` (everything else the
same), and the metric is the ratio of the two summaries, compared with the published one.
"""

from __future__ import annotations

from typing import Callable

from sim.errors import ConfigError


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if not num or not den else num / den


#: metric -> ("gain", function of (summary with the tier, summary without it))
GAIN_METRICS: dict[str, tuple[str, Callable[..., float | None]]] = {
    # TTFT without the tier / with it: how many times faster the first token comes
    "offload_ttft_speedup": ("gain", lambda on, off: _ratio(off["ttft_s"]["mean"], on["ttft_s"]["mean"])),
    # whole-run token throughput (prompt + output) with the tier / without it
    "offload_throughput_gain": ("gain", lambda on, off: _ratio(on["throughput"]["total_tokens_per_s"],
                                                               off["throughput"]["total_tokens_per_s"])),
}


def without_tier(data: dict, path: str) -> dict:
    """The scenario mapping ``data`` (a case's, with ``kv.offload``) with ``kv.offload: null``."""
    kv = dict(data.get("kv") or {})
    if not kv.get("offload"):
        raise ConfigError(path, "scenario.kv.offload", "an offload_gain case states the run with its tier: set kv.offload")
    kv["offload"] = None
    return {**data, "kv": kv}


def simulate_gain(data: dict, path: str, fn) -> float | None:
    """``fn`` of the summaries of the scenario ``data`` run with its tier and without it."""
    from sim.config.scenario import parse_scenario
    from sim.engine.logs.metrics import summarize
    from sim.engine.simulation import Simulation

    off = without_tier(data, path)
    on_summary = summarize(Simulation(parse_scenario(data, path)).run())
    off_summary = summarize(Simulation(parse_scenario(off, path)).run())
    return fn(on_summary, off_summary)

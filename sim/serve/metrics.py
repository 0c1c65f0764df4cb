"""``/metrics``: the served engines' state in Prometheus text format, under vLLM's metric
names (vllm/v1/metrics/loggers.py), so dashboards, autoscalers and gateways that read a vLLM
server read this one. Each engine (a replica) is labelled ``engine="<index>"`` beside
``model_name``, as vLLM labels its engines. Times are simulated seconds. ``kvsim:`` metrics
are this server's own: rejections by reason, simulated time, and how far the loop lags.
"""

from __future__ import annotations

from sim.serve.engine import ABORT_REASON, ServedEngine


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v)) if isinstance(v, float) else str(v)


def render(engines: list[ServedEngine], model_name: str, now_s: float) -> str:
    """The exposition text for ``engines`` at simulated time ``now_s``."""
    lines: list[str] = []

    def family(name: str, kind: str, help_: str, rows) -> None:
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in rows:
            lines.append(f"{name}{{{labels}}} {_fmt(value)}")

    lab = [f'engine="{i}",model_name="{model_name}"' for i in range(len(engines))]

    def per_engine(fn):
        return [(lab[i], fn(e)) for i, e in enumerate(engines)]

    family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           per_engine(lambda e: len(e.scheduler.running)))
    family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           per_engine(lambda e: len(e.scheduler.waiting) + len(e._arrived) + len(e._pending)))
    family("vllm:num_requests_swapped", "gauge", "Number of requests swapped out to CPU.",
           per_engine(lambda e: len(e.scheduler.swapped)))
    family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           per_engine(lambda e: e.kv_usage()))
    cache = [e.allocator.prefix_cache_stats() for e in engines]
    family("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.",
           [(lab[i], c.queried_tokens) for i, c in enumerate(cache)])
    family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
           [(lab[i], c.hit_tokens) for i, c in enumerate(cache)])
    family("vllm:num_preemptions_total", "counter", "Cumulative number of preemptions from the engine.",
           per_engine(lambda e: e.parts.preemptor.num_recompute + e.parts.preemptor.num_swap))
    family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed (completed requests).",
           per_engine(lambda e: e.stats.prompt_tokens))
    family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           per_engine(lambda e: e.stats.generation_tokens))
    rows = []
    for i, e in enumerate(engines):
        rows.append((lab[i] + ',finished_reason="length"', e.stats.completed))
        rows.append((lab[i] + ',finished_reason="abort"', e.stats.rejects.get(ABORT_REASON, 0)))
    family("vllm:request_success_total", "counter", "Count of finished requests by finish reason.", rows)
    for name, attr, help_ in (
            ("vllm:time_to_first_token_seconds", "ttft", "Histogram of time to first token in seconds."),
            ("vllm:inter_token_latency_seconds", "itl", "Histogram of inter-token latency in seconds."),
            ("vllm:e2e_request_latency_seconds", "e2e", "Histogram of e2e request latency in seconds."),
            ("vllm:request_queue_time_seconds", "queue", "Histogram of time spent in WAITING phase for request.")):
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} histogram")
        for i, e in enumerate(engines):
            h = getattr(e.stats, attr)
            for le, count in h.buckets():
                lines.append(f'{name}_bucket{{{lab[i]},le="{_fmt(le)}"}} {count}')
            lines.append(f"{name}_sum{{{lab[i]}}} {_fmt(h.total)}")
            lines.append(f"{name}_count{{{lab[i]}}} {h.n}")
    family("kvsim:requests_arrived_total", "counter", "Requests that reached the server.",
           per_engine(lambda e: e.stats.arrived))
    family("kvsim:requests_in_flight", "gauge", "Requests arrived and neither completed nor rejected nor aborted.",
           per_engine(lambda e: e.in_flight()))
    rows = [(lab[i] + f',reason="{reason}"', n) for i, e in enumerate(engines)
            for reason, n in sorted(e.stats.rejects.items())]
    family("kvsim:requests_rejected_total", "counter",
           "Requests refused (503/400) or aborted by their client (reason client_abort), by reason.", rows)
    family("kvsim:engine_steps_total", "counter", "Engine steps simulated.", per_engine(lambda e: e.stats.steps))
    family("kvsim:engine_lag_seconds", "gauge",
           "The most the engine loop has fallen behind the wall clock, in simulated seconds.",
           per_engine(lambda e: e.lag_s))
    lines.append("# HELP kvsim:simulated_time_seconds Simulated seconds since the server started.")
    lines.append("# TYPE kvsim:simulated_time_seconds gauge")
    lines.append(f'kvsim:simulated_time_seconds{{model_name="{model_name}"}} {_fmt(now_s)}')
    return "\n".join(lines) + "\n"

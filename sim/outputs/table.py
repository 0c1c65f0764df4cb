"""Terminal output of ``sim run``: a progress bar while it runs, a table when done."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from sim.engine.cluster.router import cache_aware_line
from sim.engine.logs.metrics import STAT_KEYS, stat_label
from sim.engine.pipeline.summary import pipeline_title, replica_label, virtual_engines


@contextmanager
def progress_bar(show: bool, total_sessions: int):
    """Yield a callback ``(sim_time_s, num_done, num_arrived)`` (or None when hidden)."""
    if not show:
        yield None
        return
    from rich.console import Console  # (here: a --quiet run does not import rich)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
               TextColumn("requests done, t={task.fields[t]:.0f}s"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("sim", total=None, t=0.0)
        state = {"calls": 0}

        def update(now: float, done: int, arrived: int) -> None:
            state["calls"] += 1
            if state["calls"] % 512 == 0:  # the bar is cheap, but not free
                bar.update(task, completed=done, total=max(arrived, total_sessions), t=now)

        yield update


def _ms(stats: dict, key: str) -> str:
    v = stats.get(key)
    return "-" if v is None else f"{v * 1e3:,.1f}"


def print_summary(s: dict, out_dir: Path, report: bool = True) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    r, kv = s["requests"], s["kv"]
    t = Table(title=f"{s['scenario']}: {s['model']} on {s['gpu']} (calibration: {s.get('calibration_label', s['calibration_source'])})",
              show_header=True, header_style="bold")
    t.add_column("metric")
    for k in STAT_KEYS:
        t.add_column(stat_label(k), justify="right")
    for name in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        if name in s:  # (itl_s: not in a summary older than it)
            t.add_row(name.replace("_s", " (ms)"), *(_ms(s[name], k) for k in STAT_KEYS))
    console.print(t)
    reasons = ", ".join(f"{k}: {v}" for k, v in r["rejected_by_reason"].items()) or "none"
    pol = s["policies"]
    lines = [
        f"policies     {pol['allocator']}{' +prefix-cache' if pol['prefix_caching'] else ''}, "
        f"block {pol['block_size']}, {pol['batching']}, preempt by {pol['preemption']}"
        + (f"; engine {s['profile']['profile']}" if "profile" in s else ""),
        f"requests     arrived {r['arrived']}, completed {r['completed']}, rejected {r['rejected']} "
        f"({reasons}), in flight {r['in_flight']}",
        f"throughput   {s['throughput']['requests_per_s']:.2f} req/s, "
        f"{s['throughput']['output_tokens_per_s']:,.0f} output tok/s, goodput "
        f"{s['goodput_requests_per_s']:.2f} req/s",
        f"kv pool      {kv['pool_tokens']:,} tokens ({kv['pool_bytes'] / 2**30:.2f} GiB, "
        f"{kv['num_gpu_blocks']:,} blocks), {kv['max_full_length_seqs']} full-length sequences fit",
        *_memory_line(s),
        f"kv use       peak {kv['peak_used_fraction']:.1%} allocated; mean: tokens "
        f"{kv['mean_token_fraction']:.1%}, reserved {kv['mean_reserved_unused_fraction']:.1%}, "
        f"internal frag {kv['mean_internal_fragmentation_fraction']:.1%}, external frag "
        f"{kv['mean_external_fragmentation_fraction']:.1%}; allocated but unused "
        f"{kv['mean_allocated_unused_fraction']:.1%}",
        f"preemptions  recompute {s['preemptions']['recompute']}, swap {s['preemptions']['swap']}",
        f"simulated    {s['engine']['simulated_s']:,.1f} s in {s['engine']['num_steps']:,} steps, "
        f"wall {s['sim_wall_s']:.2f} s; peak {s['engine']['peak_running']:,} running, "
        f"{s['engine']['peak_waiting']:,} waiting",
    ]
    if kv.get("prefix_cache_hit_rate") is not None:
        lines.append(f"prefix cache hit rate {kv['prefix_cache_hit_rate']:.1%}")
    lines += _offload_lines(s)
    real = Path(out_dir).resolve()
    via = f" (through the link {out_dir})" if Path(out_dir).is_symlink() else ""
    lines.append(f"wrote        {real if via else out_dir}/ (summary.json, requests.csv, steps.csv"
                 f"{', report.html' if report else ''}){via}")
    lines += [f"note         {n}" for n in s.get("notes", ())]
    lines += _replica_lines(s)
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)


def _replica_lines(s: dict) -> list[str]:
    """A cluster run (sim/engine/cluster/simulation.py): its router, then one line per replica."""
    if "replicas" not in s:
        return []
    c = s["cluster"]
    if virtual_engines(s):  # one pipeline-parallel replica: its replicas entries are virtual engines
        lines = [f"pipeline     {pipeline_title(s)} (kv pool and counters above: sums over virtual engines; "
                 "peaks: the largest one's)"]
    else:
        lines = [f"cluster      {c['num_replicas']} replicas, router {c['router']}"
                 f"{', sticky sessions' if c['sticky_sessions'] else ''} (kv pool and counters above: sums "
                 "over replicas; peaks: the largest replica's)"]
        if "cache_aware" in c:
            lines.append(f"router       {cache_aware_line(c['cache_aware'])}")
    for r in s["replicas"]:
        q, hit = r["requests"], r["prefix_cache_hit_rate"]
        name = (f"{replica_label(s, r)}:" if virtual_engines(s) else
                f"replica {r['replica']:<4}" + (f" {r['role']}," if "role" in r else ""))
        lines.append(
            f"{name} arrived {q['arrived']}, completed {q['completed']}, rejected {q['rejected']}, "
            f"in flight {q['in_flight']}; peak running {r['peak_running']}, kv peak {r['kv_peak_used_fraction']:.1%}, "
            f"preempted {r['preemptions']}, busy {r['busy_share']:.0%}"
            + (f", prefix hits {hit:.1%}" if hit is not None else "")
            + f"; ttft p50/p95/p99 {_ms(r['ttft_s'], 'p50')}/{_ms(r['ttft_s'], 'p95')}/{_ms(r['ttft_s'], 'p99')} ms, "
            f"tpot p50 {_ms(r['tpot_s'], 'p50')} ms"
            + (f", itl p99 {_ms(r['itl_s'], 'p99')} ms" if "itl_s" in r else ""))
    return lines


def _memory_line(s: dict) -> list[str]:
    """One line: where a GPU's memory goes (summary.json's ``memory``); none in an older summary."""
    m = s.get("memory")
    if not m:
        return []
    gib = 2**30
    vocab = "" if m["embedding_dtype"] == m["weight_dtype"] else f", embedding/lm_head {m['embedding_dtype']}"
    free = m.get("kv_cache_free_gpu_mem_fraction")
    of = (f"{m['gpu_memory_utilization']:g} x {m['gpu_memory_bytes'] / gib:.2f} GiB" if free is None
          else f"{m['gpu_memory_bytes'] / gib:.2f} GiB")
    pool = f"KV pool {m['kv_pool_bytes'] / gib:.2f} ({m['kv_dtype']}" + (f"; {free:g} of the rest)" if free else ")")
    return [f"memory       per GPU of {of}: "
            f"weights {m['weight_bytes'] / gib:.2f} GiB ({m['weight_dtype']}{vocab}), activations "
            f"{m['activation_peak_bytes'] / gib:.2f}, runtime {m['runtime_overhead_bytes'] / gib:.2f}, {pool}"]


def _offload_lines(s: dict) -> list[str]:
    """summary.json's ``kv_offload``: one line for the host link, one per tier below the GPU."""
    t = s.get("kv_offload")
    if not t:
        return []
    gib = 2**30
    lines = [f"kv offload   {t['tier']}: {t['hit_tokens']:,} prompt tokens loaded instead of prefilled "
             f"(hit rate {t['hit_rate']:.1%} of {t['lookup_tokens']:,} looked up); host link: "
             f"{t['bytes_loaded'] / gib:,.1f} GiB to the GPU in {t['load_link_busy_s']:,.2f} s, "
             f"{t['bytes_stored'] / gib:,.1f} GiB from it in {t['store_link_busy_s']:,.2f} s"]
    tiers = t.get("tiers")
    if tiers:
        cpu, disk = tiers["cpu"], tiers["disk"]
        lines.append(f"  cpu tier   {cpu['capacity_bytes'] / gib:,.1f} GiB: {cpu['hit_tokens']:,} hit tokens; "
                     f"{cpu['blocks_demoted']:,} blocks demoted to disk")
        lines.append(f"  disk tier  {disk['capacity_bytes'] / gib:,.1f} GiB: {disk['hit_tokens']:,} hit tokens; "
                     f"read {disk['bytes_read'] / gib:,.1f} GiB in {disk['read_busy_s']:,.2f} s, "
                     f"wrote {disk['bytes_written'] / gib:,.1f} GiB in {disk['write_busy_s']:,.2f} s")
    return lines

"""``report.html``: one self-contained interactive page per run (plotly.js inlined once).

Sections: the key numbers; the KV memory timeline as stacked areas (tokens, reserved,
internal and external fragmentation, free), in the spirit of the PagedAttention paper's
breakdown; batch size and tokens per step; queue lengths; preemption and swap events;
TTFT, TPOT and E2E CDFs with the SLO marked (log or linear axes); a request timeline for a
sample of requests; every summary number, the scenario and the calibration used.
Long runs are binned to at most ``MAX_POINTS`` points per trace (time-weighted means; see
:mod:`sim.outputs.run_figures`), so the page's size does not grow with the run.
A section that fails to render becomes a visible error box (and a warning on stderr), so a
report bug never costs the run its summary and CSVs.
"""

from __future__ import annotations

import html
import json
import sys

from plotly.io import to_html

import yaml

from sim.outputs.figures import LatencySeries, latency_cdf_figure
from sim.engine.cluster.router import cache_aware_line
from sim.engine.cluster.simulation import ClusterResult
from sim.engine.logs.metrics import STAT_KEYS, stat_label
from sim.engine.pipeline.summary import pipeline_title, replica_label, virtual_engines
from sim.outputs.run_figures import (_events_figure, _load_figure, _memory_figure, _replicas_figure,
                                     _timeline_figure)

_CAL_SCALARS = ("gpu_name", "memory_bytes", "hbm_bandwidth_bytes_per_s", "bandwidth_efficiency", "peak_flops",
                "compute_eff_max", "compute_m_half_tokens", "pcie_bandwidth_bytes_per_s", "kernel_launch_s",
                "step_overhead_s", "schema", "kernel_timing")


def _rows(pairs) -> str:
    return "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(_shown(v))}</td></tr>" for k, v in pairs)


def _kernels_html(kernels: dict) -> str:
    """Fitted kernel models (measured calibrations): accuracy and parameters, one row each."""
    if not kernels:
        return ""
    head = "<tr><th>kernel</th><th>cv MAPE</th><th>train MAPE</th><th>records</th><th>shapes</th>" \
           "<th>measured rows</th><th>parameters</th></tr>"
    rows = []
    for name, fit in kernels.items():
        params = ", ".join(f"{k} {_shown(v)}" for k, v in fit.params.items())
        cells = [name, *("-" if v is None else f"{v:.1%}" for v in (fit.cv_mape, fit.train_mape)),
                 str(fit.num_records), str(fit.num_shapes),
                 str(len(fit.grid)), params]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return f"<h3>Fitted kernel models ({len(kernels)})</h3><table class='summary'>{head}{''.join(rows)}</table>"


def _calibration_html(calibration) -> str:
    """The calibration the run used: its numbers, fitted kernels and step composition when
    measured, and its provenance (never the raw measurement grids)."""
    if calibration is None:
        return ""
    label = getattr(calibration, "source_label", str(calibration.source))
    parts = [f"<p>{html.escape(calibration.name)} ({html.escape(label)})</p>",
             "<table class='summary'>" + _rows((k, getattr(calibration, k)) for k in _CAL_SCALARS) + "</table>",
             _kernels_html(calibration.kernels)]
    if calibration.composition is not None:
        parts.append("<h3>Step composition (kernel sum to measured step)</h3><table class='summary'>"
                     + _rows(calibration.composition.to_dict().items()) + "</table>")
    if calibration.provenance:
        parts.append(f"<h3>Provenance</h3><table class='summary'>{_rows(calibration.provenance.items())}</table>")
    return "<details open><summary>Calibration</summary>" + "".join(parts) + "</details>"


def _shown(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else v if isinstance(v, str) else str(v)


def _section_items(doc: dict, nested: bool, prefix: str = ""):
    """(key, value) of a summary section; ``nested``: mappings by dotted keys (kv_offload.tiers.disk.hit_tokens)."""
    for k, v in doc.items():
        if nested and isinstance(v, dict):
            yield from _section_items(v, nested, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _summary_html(summary: dict, scenario_yaml: str) -> str:
    rows = []
    for section in ("requests", "throughput", "kv", "kv_offload", "preemptions", "engine", "cluster"):
        for k, v in _section_items(summary.get(section, {}), section == "kv_offload"):
            shown = f"{v:.4g}" if isinstance(v, float) else html.escape(json.dumps(v))
            rows.append(f"<tr><td>{section}.{k}</td><td>{shown}</td></tr>")
    for k in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        s = summary.get(k, {})
        vals = ", ".join(f"{stat_label(q)} {s[q]:.4g}" for q in STAT_KEYS if s.get(q) is not None)
        rows.append(f"<tr><td>{k}</td><td>{vals}</td></tr>")
    return (
        "<h2>Summary</h2><table class='summary'>" + "".join(rows) + "</table>"
        "<details open><summary>Scenario (as run, defaults filled in)</summary><pre>"
        + html.escape(scenario_yaml) + "</pre></details>"
    )


def _replicas_html(s: dict) -> str:
    """A cluster run: one row per replica (summary.json's ``replicas``)."""
    c = s["cluster"]
    head = ("<tr><th>replica</th><th>arrived</th><th>completed</th><th>rejected</th><th>in flight</th>"
            "<th>peak running</th><th>KV peak</th><th>preemptions</th><th>busy</th><th>prefix hits</th>"
            "<th>TTFT p50 / p95 / p99</th><th>TPOT p50 / p95 / p99</th><th>ITL p50 / p95 / p99</th></tr>")

    def ms(stats: dict) -> str:
        return " / ".join("-" if stats.get(q) is None else f"{stats[q] * 1e3:,.1f} ms" for q in ("p50", "p95", "p99"))

    roles = "role" in s["replicas"][0]  # disaggregated prefill/decode pools
    if roles:
        head = head.replace("<th>replica</th>", "<th>replica</th><th>role</th>")
    pipeline = virtual_engines(s) > 0  # one pipeline-parallel replica's virtual engines (sim/engine/pipeline/simulation.py)
    if pipeline:
        head = head.replace("<th>replica</th>", "<th>virtual engine (stage pipeline)</th>")
    rows = []
    for r in s["replicas"]:
        q, hit = r["requests"], r["prefix_cache_hit_rate"]
        cells = [r["replica"], *([r["role"]] if roles else []), q["arrived"], q["completed"], q["rejected"], q["in_flight"], r["peak_running"],
                 f"{r['kv_peak_used_fraction']:.1%}", r["preemptions"], f"{r['busy_share']:.0%}",
                 "-" if hit is None else f"{hit:.1%}", ms(r["ttft_s"]), ms(r["tpot_s"]), ms(r.get("itl_s", {}))]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in cells) + "</tr>")
    title = (f"{c['num_replicas']} replicas, router {c['router']}"
             f"{', sticky sessions' if c['sticky_sessions'] else ''}")
    if "cache_aware" in c:  # SGLang's cache-aware router: where its picks went
        title += "; " + cache_aware_line(c["cache_aware"])
    if "disaggregation" in c:
        d = c["disaggregation"]
        title += (f"; disaggregated: {d['prefill_replicas']} prefill, {d['decode_replicas']} decode "
                  f"(decode router {d['decode_router']}), KV moved {d['kv_transfer']['bytes_moved'] / 2**30:,.1f} GiB")
    if pipeline:
        return (f"<h2>Virtual engines</h2><p>{html.escape(pipeline_title(s))}. The numbers above are over every "
                "request; KV pool sizes and counters are sums over the virtual engines, peaks the largest one's.</p>"
                f"<table class='summary replicas'>{head}{''.join(rows)}</table>")
    return (f"<h2>Replicas</h2><p>{html.escape(title)}. The numbers above are over every request; "
            "KV pool sizes and counters are sums over replicas, peaks the largest replica's.</p>"
            f"<table class='summary replicas'>{head}{''.join(rows)}</table>")


def _card(value: str, label: str) -> str:
    return f"<div class='card'><b>{html.escape(value)}</b><span>{html.escape(label)}</span></div>"


def _key_numbers_html(s: dict) -> str:
    """The numbers people look for first, as cards above the plots."""
    r, kv, pre = s["requests"], s["kv"], s["preemptions"]

    def ms(section: str, q: str) -> str:
        v = s.get(section, {}).get(q)
        return "-" if v is None else f"{v * 1e3:,.0f} ms" if v < 10 else f"{v:,.0f} s"

    attained = s.get("slo", {}).get("attained_fraction")
    cards = [
        _card(f"{r['completed']:,} / {r['arrived']:,}", "requests completed / arrived"),
        _card(f"{r['rejected']:,}", "rejected" + (f" ({', '.join(r['rejected_by_reason'])})" if r["rejected"] else "")),
        _card(f"{s['throughput']['requests_per_s']:.2f} req/s", f"{s['throughput']['output_tokens_per_s']:,.0f} output tokens/s"),
        _card(f"{s['goodput_requests_per_s']:.2f} req/s", "goodput" + (f" ({attained:.0%} meet the SLO)" if attained is not None else "")),
        _card(f"{ms('ttft_s', 'p50')} / {ms('ttft_s', 'p95')} / {ms('ttft_s', 'p99')}", "TTFT p50 / p95 / p99"),
        _card(f"{ms('tpot_s', 'p50')} / {ms('tpot_s', 'p95')} / {ms('tpot_s', 'p99')}", "TPOT p50 / p95 / p99"),
        _card(f"{ms('itl_s', 'p50')} / {ms('itl_s', 'p95')} / {ms('itl_s', 'p99')}", "ITL p50 / p95 / p99 (every token's gap)"),
        _card(f"{kv['mean_allocated_unused_fraction']:.1%}", "allocated KV not holding tokens"),
        _card(f"{kv['peak_used_fraction']:.0%}", f"peak KV pool use ({kv['pool_tokens']:,} tokens)" if "replicas" not in s
              else f"peak KV use of a {'virtual engine' if virtual_engines(s) else 'replica'} "
              f"({kv['pool_tokens'] // len(s['replicas']):,} tokens each)"),
        _card(f"{pre['recompute']:,} / {pre['swap']:,}", "preemptions: recompute / swap"),
    ]
    fe = s.get("engine", {}).get("frontend_busy_share")
    if fe is not None:  # an API server's front end: its CPUs' share of the run (notes say when it binds)
        servers = s.get("profile", {}).get("api_servers", 1)
        cards.append(_card(f"{fe:.0%}", f"front end busy ({servers} API server{'s' if servers != 1 else ''})"))
    return "<div class='cards'>" + "".join(cards) + "</div>"


def _load_calibration(sc):
    from sim.calib.calibration import load_calibration
    from sim.errors import ConfigError

    try:
        return load_calibration(sc.gpu, source=sc.source_path, key="gpu")
    except ConfigError:
        return None


def render_report(result, summary: dict, calibration=None, plotly=True) -> str:
    """The whole report as one HTML string. ``calibration``: the one the run used (read
    again from the scenario's ``gpu`` when not given). Never raises for a bug of its own: a
    section that fails is an error box, a page that fails a page saying so (module docstring).
    ``plotly``: plotly's ``include_plotlyjs`` (sim/outputs/plotlyjs.py's ``include``)."""
    page = _guarded("whole report", lambda: _render(result, summary, calibration, plotly))
    if "<html>" in page:
        return page
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>kvsim report</title></head><body>{page}</body></html>"


def _render(result, summary: dict, calibration, plotly=True) -> str:
    sc = result.scenario
    replicas = ""
    if isinstance(result, ClusterResult):  # replicas behind a router (sim/engine/cluster/simulation.py)
        logs = [r.steps.condensed() for r in result.replicas]  # bounded rows per replica
        pool = summary["kv"]["pool_tokens"] // len(logs)
        reps = summary.get("replicas", [])
        if reps and "role" in reps[0]:  # disaggregated pools: each replica's own pool and role
            pool = [r["kv_pool_tokens"] for r in reps]
        names = [replica_label(summary, r) for r in reps] if reps else None  # pipeline: its virtual engines
        figs = {"replicas": lambda: _replicas_figure(logs, pool, names)}
        replicas = _guarded("replicas", lambda: _replicas_html(summary))
    else:
        steps = result.steps.condensed()  # the log itself, or at most 200,000 merged rows of a long one
        pool = summary["kv"]["pool_tokens"]
        figs = {"KV memory": lambda: _memory_figure(steps, pool), "engine load": lambda: _load_figure(steps),
                "preemption events": lambda: _events_figure(steps, str(sc.scheduler.preemption))}
    figs.update({
        "latency CDFs": lambda: latency_cdf_figure(
            [LatencySeries.of_requests(result.requests)], slo_s=(sc.slo.ttft_s, sc.slo.tpot_s, None),
            axis_toggle=True),
        "request timeline": lambda: _timeline_figure(result.requests)})
    validation = summary.get("validation")  # sim run --validate-every N (sim/outputs/validation_section.py)
    if validation is not None:
        from sim.outputs.validation_section import validation_figure, validation_html

        figs["validation"] = lambda: validation_figure(validation)
    parts, js = [], plotly
    for name, build in figs.items():
        part = _guarded(name, lambda: to_html(build(), full_html=False, include_plotlyjs=js,
                                              config={"responsive": True}))
        js = js if "section-error" in part else False  # plotly.js included once, with the first figure drawn
        parts.append(part)
    scenario_yaml = yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False)
    if calibration is None:
        calibration = _load_calibration(sc)
    title = f"kvsim: {sc.name}"
    head = (f"<h1>{html.escape(title)}</h1><p>{html.escape(summary['model'])} on "
            f"{html.escape(summary['gpu'])} (calibration: "
            f"{html.escape(summary.get('calibration_label', summary['calibration_source']))}). "
            f"{html.escape(sc.description)}</p>")
    head += "".join(f"<p class='note'><b>Note:</b> {html.escape(n)}</p>" for n in summary.get("notes", ()))
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px}"
             "table.summary td{padding:2px 10px;border-bottom:1px solid #eee;font-size:13px}"
             ".cards{display:flex;flex-wrap:wrap;gap:10px}.card{background:#f1f3f5;border-radius:6px;"
             "padding:6px 12px;min-width:150px}.card b{display:block;font-size:20px}"
             ".card span{font-size:12px;color:#495057}"
             ".note{background:#fff3bf;border-left:4px solid #f59f00;padding:6px 10px}"
             "h3{font-size:15px;margin:1em 0 .3em}table.summary th{text-align:left;font-size:13px;padding:2px 10px}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{head}{_key_numbers_html(summary)}{replicas}"
            + "".join(f"<div class='plot'>{p}</div>" for p in parts)
            + ("" if validation is None else _guarded("validation", lambda: validation_html(validation)))
            + _guarded("summary", lambda: _summary_html(summary, scenario_yaml))
            + _guarded("calibration", lambda: _calibration_html(calibration)) + "</body></html>")


def _guarded(name: str, render) -> str:
    """One section's HTML; a section that fails becomes a visible error box (and a warning on
    stderr) instead of taking the whole report, and the run's other outputs, down with it."""
    try:
        return render()
    except Exception as exc:  # noqa: BLE001 - any bug in one section must not lose the run
        print(f"warning: report.html: the {name} section failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return (f"<p class='note section-error'><b>The {html.escape(name)} section could not be drawn:</b> "
                f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</p>")

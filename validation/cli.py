"""``sim validate SCENARIO --device cpu|cuda:0 [--calibration CAL] [--out DIR]``.

Writes ``validation.json`` (lockstep step-time errors; open-loop latency, throughput, KV
and preemption errors), ``validation_steps.csv`` (every compared step) and
``validation.html``, and prints a short table. Exits non-zero
only when it cannot run (bad input: status 2), never because the error is large.
"""

from __future__ import annotations

import importlib.util
import json
import platform
import sys
import time
from pathlib import Path

from sim.errors import ConfigError
from sim.kv import AllocatorKind


def _check(sc) -> None:
    src = sc.source_path
    if sc.kv.allocator != AllocatorKind.PAGED:
        raise ConfigError(src, "kv.allocator", "sim validate runs the paged allocator only (the real "
                          "engine's KV cache is block-based); use 'paged'")
    if sc.kv.token_eviction.policy != "none":
        raise ConfigError(src, "kv.token_eviction.policy", "sim validate does not run token-level eviction; use 'none'")
    if sc.kv.offload is not None:  # the CPU tier's blocks move for real in lockstep (realengine/tier_copy.py)
        if isinstance(sc.kv.offload, list) and len(sc.kv.offload) > 1:
            raise ConfigError(src, "kv.offload", "sim validate moves blocks to a CPU tier only, not to disk; "
                              "list one tier: cpu")
        if (sc.kv.offload[0] if isinstance(sc.kv.offload, list) else sc.kv.offload).warm:
            raise ConfigError(src, "kv.offload.warm", "sim validate copies only blocks the run computed; set warm: false")
    if sc.engine.weight_dtype not in ("fp16", "bf16"):
        raise ConfigError(src, "engine.weight_dtype", "sim validate runs fp16 or bf16 weights")


def _available_bytes(device) -> int | None:
    """Memory the real engine can take on ``device`` now (None when unknown)."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _check_real_engine(sc, device) -> None:
    """The real engine runs dense Llama-style models and must fit in the device's memory:
    refuse, in one line, what would crash or exhaust the machine minutes later."""
    from sim.engine.parts import build_plan
    from sim.model.spec import kv_bytes_per_token
    from sim.model.weights import weight_bytes

    model, _, plan = build_plan(sc)
    if model.is_mla or model.is_moe:
        kind = "MLA" if model.is_mla else "mixture-of-experts"
        raise ConfigError(sc.source_path, "model", f"sim validate's real engine runs dense Llama-style "
                          f"models; {model.name} is {kind}: validate with a dense model of similar shapes")
    weights = weight_bytes(model, 2)
    kv = plan.num_gpu_blocks * plan.block_size * kv_bytes_per_token(model, "bf16")
    free = _available_bytes(device)
    # random weights are drawn in fp32 and cast, layer by layer: half again as much at the peak
    if free is not None and 1.5 * weights + kv > 0.8 * free:
        gib = 2**30
        key = "model" if 1.5 * weights > 0.8 * free else "engine.num_gpu_blocks_override"
        raise ConfigError(sc.source_path, key, (
            f"the real engine needs about {(1.5 * weights + kv) / gib:.1f} GiB on {device} (weights "
            f"{weights / gib:.1f} GiB and half again while they are drawn, KV pool {kv / gib:.1f} GiB of "
            f"{plan.num_gpu_blocks} blocks), more than 80% of the {free / gib:.1f} GiB available; use a "
            "smaller model or set engine.num_gpu_blocks_override"))


def _device(name: str):
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError("<cli>", "--device", f"unknown device {name!r}; use cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("<cli>", "--device", "CUDA is not available on this machine; use --device cpu")
    if device.type not in ("cpu", "cuda"):
        raise ConfigError("<cli>", "--device", f"unsupported device {name!r}; use cpu or cuda[:N]")
    return device


def _match_threads(sc, device) -> int:
    """On the CPU, run with the thread count the calibration was measured with."""
    import torch

    from sim.calib.calibration import load_calibration
    from sim.engine.parts import relative_to_scenario

    if device.type == "cpu":
        cal = load_calibration(relative_to_scenario(sc, sc.gpu), source=sc.source_path, key="gpu")
        wanted = cal.provenance.get("torch_threads")
        if wanted and wanted.isdigit():
            torch.set_num_threads(int(wanted))
    return torch.get_num_threads()


def run_validate(args) -> int:
    if importlib.util.find_spec("torch") is None:
        raise ConfigError("<cli>", "validate", "needs torch: pip install -e '.[gpu]'")
    from sim.engine.simulation import SimResult
    from sim.engine.logs.metrics import summarize
    from sim.outputs.files import VALIDATE_FILES, prepare_out_dir, safe_name, write_outputs
    from sim.config.scenario import load_scenario
    from realengine.model import make_model
    from validation import compare, runner
    from validation.report import render_validation

    overrides = list(args.overrides) + ([f"gpu={args.calibration}"] if args.calibration else [])
    sc = load_scenario(args.scenario, overrides)
    if sc.engine.profile != "eager":
        # The validation engine launches every kernel from Python, one by one, with no front
        # end: kvsim's eager profile is the model of exactly that engine.
        if "profile" in sc.engine.model_fields_set:  # said so in the file or with --set
            print(f"note: sim validate runs the eager validation engine; engine.profile {sc.engine.profile} "
                  "is replaced by eager", file=sys.stderr)
        sc = load_scenario(args.scenario, [*overrides, "engine.profile=eager"])
    _check(sc)
    if sc.kv.offload is not None and args.mode != "lockstep":
        raise ConfigError(sc.source_path, "kv.offload", "sim validate moves a CPU tier's blocks in lockstep only "
                          "(the open-loop engine has no tier): pass --mode lockstep")
    out_dir = Path(args.out) if args.out else Path("runs") / f"{safe_name(sc.name)}-validate"
    stale = prepare_out_dir(out_dir, VALIDATE_FILES, force=getattr(args, "force", False))
    device = _device(args.device)
    _check_real_engine(sc, device)  # before any model is built
    threads = _match_threads(sc, device)
    t0 = time.perf_counter()
    sim_result = runner.simulate(sc)  # also checks the plan before any model is built
    model = make_model(sc, device)
    if not args.no_warmup:
        runner.warm_up(sc, model)
    drift = None if args.no_drift_check else _drift(sc, device)
    result: dict = {"scenario": sc.name, "device": str(device), "calibration": sim_result.calibration_name,
                    "calibration_source": sim_result.calibration_source, "model": sc.model,
                    "machine": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "torch_threads": threads, "calibration_drift": drift}
    lock_samples, real_reqs, open_samples, tier_samples = [], None, [], []
    if args.mode in ("both", "lockstep"):
        lock_result, lock_samples = runner.run_lockstep(sc, device, model, tier_samples)
        if sc.kv.offload is not None:
            from validation.tier_errors import transfer_errors

            spec = lock_result.allocator.tier.spec
            reference = tier_samples.pop() if tier_samples else None
            result["tier_transfers"] = transfer_errors(tier_samples, spec.bandwidth_bytes_per_s, spec.latency_s)
            result["tier_transfers"]["reference_copy_bytes_per_s"] = reference  # a contiguous copy, timed after the run
        result["lockstep"] = compare.step_errors(lock_samples)
        result["lockstep"]["same_decisions_as_simulator"] = (
            [s.batch for s in lock_samples] == _batches(sc))
    if args.mode in ("both", "open-loop"):
        real = runner.run_open_loop(sc, model)
        real_result = SimResult(sc, sim_result.plan, "real engine", "measured", real.requests, real.steps,
                                real.scheduler, real.preemptor, real.allocator, real.swap,
                                sim_wall_s=real.end_s, end_s=real.end_s, profile=sim_result.profile)
        real_summary, sim_summary = summarize(real_result), summarize(sim_result)
        result["open_loop"] = compare.summary_errors(real_summary, sim_summary)
        result["open_loop"]["real_step_errors"] = compare.step_errors(real.samples)
        result["open_loop"]["real_step_errors_by_idle"] = compare.errors_by_idle(real.samples)
        real_reqs, open_samples = real.requests, real.samples
    result["wall_s"] = time.perf_counter() - t0
    write_outputs(out_dir, {
        "validation.json": json.dumps(result, indent=2) + "\n",
        "validation_steps.csv": compare.steps_csv(lock_samples, open_samples),
        "validation.html": render_validation(result, lock_samples, real_reqs, sim_result.requests),
    }, stale)
    _print(result, out_dir)
    return 0


def _drift(sc, device) -> dict | None:
    """How the calibration's recorded whole steps run now (validation/drift.py)."""
    from sim.calib.calibration import calibration_file
    from sim.engine.parts import build_plan, relative_to_scenario
    from validation.drift import calibration_drift

    model, cal, _ = build_plan(sc)
    return calibration_drift(cal, calibration_file(relative_to_scenario(sc, sc.gpu)), device, model)


def _batches(sc) -> list[tuple]:
    """The simulator's own decisions, step by step, for the lockstep comparison."""
    from sim.engine.simulation import Simulation

    batches: list[tuple] = []
    sim = Simulation(sc, step_hook=lambda out: out.scheduled and batches.append(
        tuple((r.request_id, n) for r, n in out.scheduled)))
    sim.run()
    return batches


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _print(result: dict, out_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from sim.engine.logs.metrics import stat_label
    from validation.compare import QUANTILES
    from validation.drift import needs_recalibration

    console = Console()
    drift = result.get("calibration_drift")
    if drift:
        console.print(f"calibration check: {drift['num_steps']} of the calibration's recorded steps run at "
                      f"{drift['ratio']:.2f}x their calibrated time now ({drift['min_ratio']:.2f}-"
                      f"{drift['max_ratio']:.2f}x)", highlight=False)
        if needs_recalibration(drift):
            console.print("  the machine has changed since it was calibrated: recalibrate "
                          "(microbench calibrate) for a validation of the simulator, not of the drift",
                          highlight=False)
    lock = result.get("lockstep")
    if lock and lock.get("num_steps"):
        console.print(f"lockstep: {lock['num_steps']} steps, step-time MAPE {lock['mape']:.1%}, "
                      f"bias {_pct(lock['bias'])}, same decisions as the simulator: "
                      f"{lock['same_decisions_as_simulator']}", highlight=False)
        if "kernel_sum" in lock:
            console.print(f"  (the kernel sum without the calibration's composition: MAPE "
                          f"{lock['kernel_sum']['mape']:.1%}, bias {_pct(lock['kernel_sum']['bias'])})",
                          highlight=False)
    tt = result.get("tier_transfers")
    for d in ("load", "store") if tt else ():
        if tt[d]["count"]:
            console.print(f"cpu tier {d}s: {tt[d]['count']} ({tt[d]['bytes'] / 2**20:,.1f} MiB), transfer-time MAPE "
                          f"{tt[d]['mape']:.1%}, bias {_pct(tt[d]['bias'])}, total {_pct(tt[d]['total_rel_error'])}; "
                          f"copied at {tt[d]['achieved_bytes_per_s'] / 1e9:.1f} GB/s (assumed "
                          f"{tt['assumed_bandwidth_bytes_per_s'] / 1e9:.1f}; one contiguous copy now "
                          f"{(tt.get('reference_copy_bytes_per_s') or 0) / 1e9:.1f})", highlight=False)
    ol = result.get("open_loop")
    if ol:
        t = Table(title="open loop: simulator against real engine (relative error)")
        t.add_column("metric")
        shown = [q for q in QUANTILES if all(q in ol[m] for m in ("ttft_s", "tpot_s", "e2e_s"))]
        for q in shown:
            t.add_column(stat_label(q), justify="right")
        for m in ("ttft_s", "tpot_s", "e2e_s"):
            t.add_row(m, *(_pct(ol[m][q]["rel_error"]) for q in shown))
        console.print(t)
        console.print(f"throughput {_pct(ol['requests_per_s']['rel_error'])} (requests/s), "
                      f"{_pct(ol['output_tokens_per_s']['rel_error'])} (output tokens/s), peak KV allocated "
                      f"{_pct(ol['peak_kv_used_fraction']['rel_error'])}", highlight=False)
        console.print(_counts_table(ol))
        done = ol.get("completed", {})
        if done.get("real") != done.get("sim"):
            console.print(f"  the engines completed different numbers of requests (real {done.get('real')}, sim "
                          f"{done.get('sim')}): the latency quantiles are over different sets", highlight=False)
    console.print(f"wrote {out_dir}/validation.json, validation_steps.csv, validation.html "
                  f"({result['wall_s']:.0f} s)",
                  highlight=False)


_COUNTS = (("completed", "requests completed", 1), ("rejected", "requests rejected", 1),
           ("preemptions_recompute", "preemptions: recompute", 1), ("preemptions_swap", "preemptions: swap", 1),
           ("preemptions_swap_fallback_to_recompute", "  swaps that fell back to recompute", 1),
           ("preemptions_recomputed_tokens", "tokens recomputed", 1),
           ("preemptions_swap_out_bytes", "swapped out (MiB)", 2**20), ("preemptions_swap_in_bytes", "swapped in (MiB)", 2**20))


def _counts_table(ol: dict):
    """What happened in each engine, side by side (counts: no relative error)."""
    from rich.table import Table

    t = Table(title="open loop: counts")
    for name, justify in (("", "left"), ("real", "right"), ("sim", "right")):
        t.add_column(name, justify=justify)
    for key, label, unit in _COUNTS:
        if key in ol:
            t.add_row(label, *("-" if ol[key].get(w) is None else f"{ol[key][w] / unit:,.4g}" if unit != 1
                               else f"{ol[key][w]:,}" for w in ("real", "sim")))
    return t

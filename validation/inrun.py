"""Validation inside a run: ``sim run SCENARIO --validate-every N``.

The simulation runs as always; every Nth engine step that computes a batch is also executed
on the real engine path (realengine/'s small Llama on a paged KV cache: the Triton kernels
on CUDA, their torch references on the CPU) with the scenario's own model shapes and the
allocator's own block tables, and timed. The simulated clock never reads the measurement,
so the run's other outputs are those of the same run without the flag; only summary.json
(its ``validation`` section), report.html and the terminal say more. With ``--correct``
the simulation's runner becomes :class:`sim.engine.step.correction.CorrectedRunner`, whose
factors the samples move (then the clock does change: that is the point).

What is compared: packing the batch, its forward and reading the sampled tokens back
(median of ``REPEATS`` runs after one untimed run: the KV writes are idempotent, so
re-running a step is the same work) against the cost model's compute time of the batch
without an idle period before it. Swaps and the after-idle factor are not sampled (the
lockstep mode of ``sim validate`` replays those).

Model size: the model runs at full size, all its layers; on the CPU models with more than
``CPU_WEIGHT_LIMIT_BYTES`` of weights are refused (a 2-core CPU would take minutes per
sample and its calibration covers small models only); on CUDA the weights and the KV pool
must fit in 80% of the free memory (``sim validate``'s check).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from sim.engine.step.correction import StepCorrection, step_kind
from validation.compare import StepTiming, shape
from sim.engine.step.predict import predicted_step_s
from sim.errors import ConfigError

CPU_WEIGHT_LIMIT_BYTES = 4 * 2**30  # 4 GiB: about 2B parameters in bf16 (qwen2.5-1.5b is 2.9 GiB)
REPEATS = 3
SUGGEST = "validate a small model's run instead (scenarios/validate-cpu.yaml)"


@dataclass(kw_only=True)
class InRunSample(StepTiming):
    step: int  # the engine step (1-based, counting steps that computed a batch)
    sim_s: float  # simulated time the step started
    kind: str  # prefill, decode or mixed
    factor: float | None = None  # --correct: the kind's factor the step ran with


class InRunValidator:
    """The step hook: counts steps, samples every ``every``th, stops sampling once
    ``budget_s`` of wall time went into executing samples (the rest are counted as skipped).
    ``time_batch(out)`` executes a batch and returns its measured seconds (or
    ``make_timer(allocator)`` makes it when the simulation is attached); ``clock`` measures
    the cost of doing so (both injectable: tests count, they do not time)."""

    def __init__(self, every: int, budget_s: float, time_batch=None, correction: StepCorrection | None = None,
                 clock=time.perf_counter, make_timer=None) -> None:
        self.every, self.budget_s, self.time_batch = every, budget_s, time_batch
        self.correction, self.clock, self.make_timer = correction, clock, make_timer
        self.cost = None
        self.now = lambda: 0.0
        self.num_steps = 0
        self.skipped = 0
        self.spent_s = 0.0
        self.samples: list[InRunSample] = []

    def attach(self, sim) -> None:
        """Read ``sim``'s cost model and clock; with a correction, run its batches corrected."""
        self.cost, self.now = sim.cost, (lambda: sim.env.now)
        if self.make_timer is not None:
            self.time_batch = self.make_timer(sim.allocator)
        if self.correction is not None:
            from sim.engine.step.correction import CorrectedRunner  # noqa: PLC0415

            sim.core.runner = CorrectedRunner(sim.cost, self.correction)

    def hook(self, out) -> None:
        if not out.scheduled:  # a swap-only batch: not an engine step that computes
            return
        self.num_steps += 1
        if self.num_steps % self.every:
            return
        if self.spent_s >= self.budget_s:
            self.skipped += 1
            return
        t0 = self.clock()
        measured = self.time_batch(out)
        self.spent_s += self.clock() - t0
        predicted = predicted_step_s(self.cost, out, 0.0)
        kind = step_kind(out.num_prefill_tokens, out.num_decode_tokens)
        factor = None
        if self.correction is not None:
            factor = self.correction.factors[kind]
            self.correction.update(kind, measured / predicted, self.now())
        self.samples.append(InRunSample(step=self.num_steps, sim_s=self.now(), kind=kind, predicted_s=predicted,
                                        measured_s=measured, factor=factor, **shape(out)))


class RealBatchTimer:
    """Times a scheduler batch on ``model`` (packing, forward, tokens read back)."""

    def __init__(self, model, allocator, block_size: int, repeats: int = REPEATS) -> None:
        import torch  # noqa: PLC0415

        self.model, self.allocator, self.block_size, self.repeats = model, allocator, block_size, repeats
        self.sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)

    def _once(self, out) -> float:
        from realengine.executor import pack_batch  # noqa: PLC0415

        self.sync()
        t0 = time.perf_counter()
        inputs = pack_batch(out, self.allocator.block_tables, self.block_size, self.model.spec.vocab_size,
                            self.model.device)
        self.model.forward(inputs).cpu()
        self.sync()
        return time.perf_counter() - t0

    def __call__(self, out) -> float:
        self._once(out)  # untimed: caches warm, first-call costs out
        return statistics.median(self._once(out) for _ in range(self.repeats))


def _device(name: str):
    import torch  # noqa: PLC0415

    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("<cli>", "--validate-device", "torch has no CUDA on this machine; use --validate-device cpu")
    return torch.device(name)


def _check_model(sc, device) -> None:
    from sim.engine.parts import build_plan  # noqa: PLC0415
    from sim.model.weights import weight_bytes  # noqa: PLC0415
    from validation.cli import _check_real_engine  # noqa: PLC0415

    model, cal, _ = build_plan(sc)
    on_cpu = cal.source == "measured" and cal.provenance.get("cuda") == "none"
    if device.type == "cpu" and not on_cpu:
        raise ConfigError(sc.source_path, "gpu", (
            f"--validate-device cpu compares with a calibration measured on a CPU; {cal.name} is not: "
            "calibrate this CPU (microbench calibrate --device cpu) and set gpu to it"))
    if device.type == "cuda" and on_cpu:
        raise ConfigError(sc.source_path, "gpu", f"--validate-device cuda compares with a GPU's calibration; "
                          f"{cal.name} was measured on a CPU: use --validate-device cpu")
    weights = weight_bytes(model, 2)
    if device.type == "cpu" and weights > CPU_WEIGHT_LIMIT_BYTES:
        raise ConfigError(sc.source_path, "model", (
            f"--validate-every runs the model at full size; {model.name}'s {weights / 2**30:.1f} GiB of weights "
            f"exceed the {CPU_WEIGHT_LIMIT_BYTES / 2**30:.0f} GiB limit on the CPU: {SUGGEST}, or use "
            "--validate-device cuda"))
    try:
        _check_real_engine(sc, device)
    except ConfigError as exc:
        raise ConfigError(exc.file, exc.key, exc.message.replace("sim validate", "--validate-every")
                          + f"; or {SUGGEST}") from None


def check_scenario(sc) -> None:
    """What the real engine cannot run, refused in one line (``sim validate``'s checks)."""
    from validation.cli import _check  # noqa: PLC0415

    try:
        _check(sc)
    except ConfigError as exc:
        raise ConfigError(exc.file, exc.key, exc.message.replace("sim validate", "--validate-every")) from None


def start(sc, device_name: str, every: int, budget_s: float, correct: bool):
    """Check, build the real model and the validator: (validator, setup facts for the section)."""
    import importlib.util  # noqa: PLC0415

    if importlib.util.find_spec("torch") is None:
        raise ConfigError("<cli>", "--validate-every", "needs torch: pip install -e '.[gpu]'")
    check_scenario(sc)
    device = _device(device_name)
    _check_model(sc, device)
    from realengine.model import make_model  # noqa: PLC0415
    from validation.cli import _drift, _match_threads  # noqa: PLC0415

    t0 = time.perf_counter()
    threads = _match_threads(sc, device)
    model = make_model(sc, device)
    drift = _drift(sc, device)
    setup = {"device": str(device), "torch_threads": threads, "calibration_drift": drift,
             "setup_s": time.perf_counter() - t0, "profile": str(sc.engine.profile)}
    validator = InRunValidator(every, budget_s, correction=StepCorrection() if correct else None,
                               make_timer=lambda allocator: RealBatchTimer(model, allocator, sc.kv.block_size))
    return validator, setup

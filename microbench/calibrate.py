"""``microbench calibrate``: run the suites on one device, keep the JSONL, fit, write the YAML.

The sweep (microbench.suites, then microbench.peaks' GEMM peaks in each math mode the
device runs) runs each case with a rich progress bar, timing it as
microbench.timing describes; every timing becomes one JSONL record (microbench.records).
Then microbench.fit turns the records into a measured calibration whose provenance says
which device, software and command produced it. Everything is checked before the first
timing (torch, the device, the models, ``--out``), and each record is appended to the JSONL
as it is measured, so an interrupted or failed run keeps its measurements.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import tempfile
import platform
import re
import shlex
import subprocess
from pathlib import Path

from microbench.cases import input_bytes, make_fns, release_models
from sim.errors import ConfigError, unlink_symlink
from microbench.checks import (MEASURED_DIR, check_device, check_fitted, check_output, import_torch,
                              warn_absurd_fits)
from microbench.interconnect_step import SUFFIX as IC_SUFFIX
from microbench.peaks import PEAK_KERNELS, describe_precision, peak_cases, peak_support
from microbench.suites import DEFAULT_MODELS, cases
from microbench.timing import (cpu_cache_bytes, rotation_copies, time_after_idle, time_cpu, time_cuda,
                               time_host_copy_cuda)


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def device_record(torch, device, argv: list[str]) -> dict:
    """The JSONL device record: name, memory and provenance of this device and software."""
    prov = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(["microbench", *argv]), "kvsim": _version("kvsim"),
            "torch": torch.__version__, "triton": _version("triton"), "python": platform.python_version(),
            "schema": "2", "host": platform.node()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, memory = props.name, int(props.total_memory)
        prov.update(cuda=str(torch.version.cuda), driver=_driver(), sm_count=str(props.multi_processor_count),
                    timing="triton.testing.do_bench median (L2 flushed, inputs rotated over > 2x L2); "
                           "host copies: CUDA events, median of 20; whole steps: perf_counter, synchronized, "
                           "back to back")
    else:
        name = f"CPU {_cpu_name()}"
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        prov.update(cuda="none", driver="none", torch_threads=str(torch.get_num_threads()),
                    cpu_count=str(os.cpu_count()),
                    timing="time.perf_counter around each call, median; inputs rotated over > 2x LLC; "
                           "whole steps back to back",
                    host_copies="host memcpy (no PCIe on a CPU device)",
                    kernels="torch reference paths (kernels.reference); KV write as index_copy_")
    prov["device"] = name
    prov["memory_bytes"] = str(memory)
    return {"name": ("cpu-" if device.type == "cpu" else "") + slug(name.replace("NVIDIA", "").replace("CPU", "")),
            "gpu_name": name, "memory_bytes": memory, "provenance": prov}


def _record(kernel: str, shape: dict, t) -> dict:
    return {"kernel": kernel, **shape, "time_s": t.median_s, "p20_s": t.p20_s, "p80_s": t.p80_s,
            "repeats": t.repeats, "source": "microbench"}


def _time_case(kernel: str, shape: dict, device, cache: int, quick: bool):
    """The Timing of one case (microbench.timing: how each kind is timed)."""
    host = kernel in ("copy_h2d", "copy_d2h", "swap_in", "swap_out")
    peak = kernel == "gemm_peak"  # compute-bound: its inputs' cache state does not matter
    copies = 1 if host or peak or kernel == "forward" else rotation_copies(input_bytes(kernel, shape), cache)
    fns = make_fns(kernel, shape, device, copies)
    if kernel == "forward" and shape.get("idle_s"):  # the first step after a lull
        return time_after_idle(fns[0], shape["idle_s"], repeats=3 if quick else 5)
    if kernel == "forward":  # a whole step, on the wall clock as the validation engine times it (it syncs)
        return time_cpu(fns, min_time_s=0.02 if quick else 0.05, min_repeats=3 if quick else 5, warmup=2)
    if device.type == "cuda":
        return time_host_copy_cuda(fns) if host else time_cuda(fns, rep_ms=40 if quick else 100)
    if peak:  # the CPU's big GEMMs: few calls (their median is steady), as cheap with or without --quick
        return time_cpu(fns, min_time_s=0.0, min_repeats=3, warmup=1)
    return time_cpu(fns, min_time_s=0.01 if quick else 0.05, min_repeats=5 if quick else 9,
                    warmup=1 if quick else 2)


def run_sweep(torch, device, todo: list[tuple[str, dict]], *, quick: bool, show_progress: bool = True,
              keep=None) -> list[dict]:
    """Time every (kernel, shape) of ``todo``; one record per case, passed to ``keep`` as it is made."""
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    cuda = device.type == "cuda"
    cache = (getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 << 20) if cuda \
        else cpu_cache_bytes()
    records = []
    columns = (TextColumn("measuring"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[what]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True, disable=not show_progress) as bar:
        task = bar.add_task("sweep", total=len(todo), what="")
        for kernel, shape in todo:
            bar.update(task, what=f"{kernel} {' '.join(f'{k}={v}' for k, v in shape.items())}")
            try:
                t = _time_case(kernel, shape, device, cache, quick)
            except Exception as exc:  # the peak suite's ops may fail beyond their trial (a size, memory)
                if kernel not in PEAK_KERNELS:
                    raise
                why = (str(exc).strip().splitlines() or [""])[0][:160]
                bar.console.print(f"  {kernel} {shape}: skipped ({type(exc).__name__}: {why})", markup=False,
                                  soft_wrap=True)
                bar.advance(task)
                continue
            records.append(_record(kernel, shape, t))
            if keep is not None:
                keep(records[-1])
            bar.advance(task)
    release_models()
    return records


class _Keeper:
    """Appends records to the JSONL as they are measured; if the file fails, keeps them for a spare file."""

    def __init__(self, path: Path, device: dict) -> None:
        self.path, self.records, self.failed = path, [], None
        unlink_symlink(path)
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self._write({"record": "device", **device})

    def _write(self, rec: dict) -> None:
        if self.failed is None:
            try:
                self.file.write(json.dumps(rec) + "\n")
                self.file.flush()
            except OSError as exc:
                self.failed = exc

    def __call__(self, rec: dict) -> None:
        self.records.append(rec)
        self._write(rec)

    def close(self, device: dict) -> Path:
        """The JSONL holding every record: ``path``, or a spare file in the temp folder if ``path`` failed."""
        try:
            self.file.close()
        except OSError as exc:
            self.failed = self.failed or exc
        if self.failed is None:
            return self.path
        from microbench.records import write_jsonl  # noqa: PLC0415

        fd, spare = tempfile.mkstemp(prefix=f"microbench-{self.path.stem}-", suffix=".jsonl")
        os.close(fd)
        write_jsonl(spare, self.records, device)
        return Path(spare)


def calibrate(argv: list[str], *, device_arg: str, models: list[str] | None, quick: bool,
              out: str | None, threads: int | None = None, show_progress: bool = True, log=print,
              device_flag: str = "--device") -> Path:
    """Check, measure (appending to ``<out>.jsonl``), fit, write ``<out>.yaml``
    (default calibrations-measured/<device>.yaml)."""
    torch = import_torch()
    import yaml  # noqa: PLC0415

    from microbench.compose import describe_composition  # noqa: PLC0415
    from microbench.fit import describe, fit  # noqa: PLC0415
    from microbench.gemm_tiles import measured_gemm_tiles  # noqa: PLC0415
    from microbench.interconnect_step import interconnect_step, with_interconnect  # noqa: PLC0415
    from sim.calib.calibration import calibration_to_dict  # noqa: PLC0415
    from sim.model.hf_config import load_model  # noqa: PLC0415

    device = check_device(torch, device_arg, device_flag)
    if threads is not None:
        torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    names = models or list(DEFAULT_MODELS[device.type])
    specs = [load_model(n, source="--model", key="model") for n in names]
    dev = device_record(torch, device, argv)
    dev["provenance"]["models"] = ", ".join(names)
    modes, dequant, notes = peak_support(torch, device)
    todo = cases(specs, device.type, quick) + peak_cases(device.type, modes, dequant)
    yaml_path = Path(out) if out else Path(MEASURED_DIR) / f"{dev['name']}{'-quick' if quick else ''}.yaml"
    check_output(yaml_path, "--out", also=(".jsonl", IC_SUFFIX))
    log(f"{dev['gpu_name']}: {len(todo)} measurements on {', '.join(names)} shapes"
        f"{' (quick)' if quick else ''}; compute peaks: {', '.join(modes) or 'none'}")
    for note in notes:
        log("  " + note)
    try:
        keeper = _Keeper(yaml_path.with_suffix(".jsonl"), dev)
    except (OSError, ValueError) as exc:
        raise ConfigError("<cli>", "--out", f"cannot write {yaml_path.with_suffix('.jsonl')}: {exc}") from None
    try:
        records = run_sweep(torch, device, todo, quick=quick, show_progress=show_progress, keep=keeper)
    except BaseException:
        print(f"measurement stopped: the {len(keeper.records)} timings so far are in "
              f"{keeper.close(dev)}", file=sys.stderr)
        raise
    jsonl_path = keeper.close(dev)
    refit = f"microbench fit {jsonl_path} -o {yaml_path}"
    if keeper.failed is not None:
        raise ConfigError("<cli>", "--out", f"writing {keeper.path} failed ({keeper.failed}); the measurements "
                          f"are kept in {jsonl_path} (fit them: {refit})")
    dev["provenance"]["measurements"] = jsonl_path.name
    try:
        cal = fit(records, device=dev, name=yaml_path.stem, gemm_tiles=measured_gemm_tiles(dev))
    except ConfigError as exc:
        raise ConfigError(str(jsonl_path), exc.key, f"{exc.message} (the measurements are kept; {refit})") from None
    except Exception:
        print(f"the fit failed; the measurements are kept in {jsonl_path} ({refit})", file=sys.stderr)
        raise
    check_fitted(cal, measurements=str(jsonl_path))
    for f in cal.kernels.values():
        log("  " + describe(f))
    if cal.composition is not None:
        log("  " + describe_composition(cal.composition))
    if (line := describe_precision(cal.precision)) is not None:
        log("  " + line)
    ic, ic_text = interconnect_step(torch, device, dev, quick=quick, jsonl_path=yaml_path.with_suffix(IC_SUFFIX),
                                    log=log)  # 2+ GPUs: NCCL timed; 1 GPU: the datasheet's (microbench.interconnect_step)
    cal = with_interconnect(cal, ic, ic_text)
    header = (f"# kvsim calibration, schema 2, measured by microbench on {dev['gpu_name']}.\n"
              f"# Raw timings: {jsonl_path.name} (refit: microbench fit {jsonl_path.name} -o {yaml_path.name}).\n")
    try:
        unlink_symlink(yaml_path)
        yaml_path.write_text(header + yaml.safe_dump(calibration_to_dict(cal), sort_keys=False, width=120))
    except OSError as exc:
        raise ConfigError("<cli>", "--out", f"cannot write {yaml_path}: {exc.strerror or exc} (the measurements "
                          f"are kept in {jsonl_path}; fit them: microbench fit {jsonl_path} -o OTHER.yaml)") from None
    warn_absurd_fits(cal, yaml_path)
    log(f"wrote {yaml_path} and {jsonl_path}")
    return yaml_path

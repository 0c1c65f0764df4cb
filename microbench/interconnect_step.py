"""``microbench calibrate``'s interconnect step: the calibration's ``interconnect:`` section.

On a CUDA device with 2 or more GPUs visible it times NCCL all-reduce, all-gather and
send/recv over 2, 4, 8 GPUs (microbench.interconnect), keeps the raw timings in
``<out>.interconnect.jsonl``, fits them (microbench.interconnect_fit) and returns the measured
section with its provenance (GPUs, driver, torch and NCCL versions, link, date). With one
GPU it says so in one line and keeps the datasheet numbers of the shipped calibration whose
``gpu_name`` is this GPU's (none: no section, and tensor parallelism will ask for one). A
failed measurement or fit is reported in one line and also keeps the datasheet numbers: the
kernel calibration is never lost to the interconnect.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import subprocess
from pathlib import Path

from sim.calib.calibration import Calibration, calibration_from_dict, shipped_calibrations_dir
from sim.calib.interconnect import LINKS, Interconnect
from sim.errors import ConfigError, read_yaml_file

SUFFIX = ".interconnect.jsonl"  # next to the calibration YAML and its kernel JSONL


def datasheet_for(gpu_name: str) -> Calibration | None:
    """The shipped datasheet calibration of ``gpu_name`` that has an interconnect section, if any."""
    for path in sorted(shipped_calibrations_dir().glob("*.yaml")):
        try:
            cal = calibration_from_dict(read_yaml_file(path), file=str(path))
        except ConfigError:
            continue
        if cal.gpu_name == gpu_name and cal.source.value == "datasheet" and cal.interconnect is not None:
            return cal
    return None


def _smi(*args: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def detect_link(torch, sheet: Calibration | None) -> tuple[str, str]:
    """(link, how it was found): NVLink from ``nvidia-smi nvlink --status`` (its generation from
    the compute capability), else the PCIe generation from ``nvidia-smi``, else the datasheet's."""
    if re.search(r"Link \d+: [\d.]+ GB/s", _smi("nvlink", "--status", "-i", "0")):
        major = torch.cuda.get_device_capability(0)[0]
        return ("nvlink2" if major <= 7 else "nvlink3" if major == 8 else "nvlink4" if major == 9 else "nvlink5"), \
            f"nvidia-smi nvlink --status: active, compute capability {major}.x"
    gen = _smi("--query-gpu=pcie.link.gen.max", "--format=csv,noheader", "-i", "0").strip()
    if gen.isdigit():
        return f"pcie{min(max(int(gen), 3), 5)}", f"no active NVLink; nvidia-smi pcie.link.gen.max {gen}"
    if sheet is not None and sheet.interconnect is not None:
        return sheet.interconnect.link, f"nvidia-smi gave nothing; the datasheet's ({sheet.name})"
    return "pcie4", "nvidia-smi gave nothing and no datasheet: assumed"


def _datasheet(sheet: Calibration | None, gpu_name: str, why: str, log) -> tuple[Interconnect | None, str | None]:
    if sheet is None:
        log(f"interconnect: {why}; no shipped datasheet for {gpu_name}, so the calibration has no interconnect "
            "section (engine.tensor_parallel_size 1 only, or add one)")
        return None, None
    log(f"interconnect: {why}; keeping the datasheet numbers of {sheet.name}")
    text = f"not measured ({why}): the datasheet numbers of calibrations/{sheet.name}.yaml"
    if sheet.provenance.get("interconnect"):
        text += ": " + sheet.provenance["interconnect"]
    return sheet.interconnect, text


def _versions(torch, world: int, driver: str) -> str:
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001 (a torch build without NCCL: the spawn failed before this)
        nccl = "unknown"
    names = sorted({torch.cuda.get_device_name(i) for i in range(world)})
    return f"{world}x {' + '.join(names)}, driver {driver}, torch {torch.__version__}, NCCL {nccl}"


def interconnect_step(torch, device, dev: dict, *, quick: bool, jsonl_path: Path,
                      log=print) -> tuple[Interconnect | None, str | None]:
    """(the interconnect section, its provenance text); (None, None) on a CPU device."""
    from microbench.interconnect import cuda_plan, measure  # noqa: PLC0415
    from microbench.interconnect_fit import write_records  # noqa: PLC0415

    if device.type != "cuda":
        return None, None
    gpu_name = dev["gpu_name"]
    sheet = datasheet_for(gpu_name)
    visible = torch.cuda.device_count()
    if visible < 2:
        return _datasheet(sheet, gpu_name, "1 GPU visible, no collective to time", log)
    plan = cuda_plan(visible, quick)
    log(f"interconnect: timing NCCL all-reduce and all-gather over {', '.join(map(str, plan.counts))} GPUs and "
        f"send/recv GPU 0 -> 1, {plan.sizes[0]:,} B to {plan.sizes[-1]:,} B")
    torch.cuda.empty_cache()  # the kernel sweep's cached memory on this GPU, for the spawned processes
    try:
        records = measure(plan)
    except Exception as exc:  # noqa: BLE001 (NCCL, a spawn, a GPU busy: keep the kernel calibration)
        why = (str(exc).strip().splitlines() or [""])[-1][:200]
        return _datasheet(sheet, gpu_name, f"the measurement failed ({type(exc).__name__}: {why})", log)
    prov = dev.get("provenance", {})
    setup = (f"microbench calibrate {prov.get('date', dt.date.today().isoformat())}, "
             f"{_versions(torch, plan.world, str(prov.get('driver', 'unknown')))}")
    link, how = detect_link(torch, sheet)
    try:
        write_records(jsonl_path, records, {**dev, "provenance": {**prov, "interconnect": setup, "link": link,
                                                                  "link_found": how}})
    except OSError as exc:
        log(f"interconnect: cannot write {jsonl_path} ({exc.strerror or exc}); the fit below is kept")
    try:
        return _fitted(records, setup=setup, link=link, how=how, jsonl_path=jsonl_path, log=log)
    except ConfigError as exc:
        return _datasheet(sheet, gpu_name, f"the fit failed ({exc.key}: {exc.message})", log)


def _fitted(records: list[dict], *, setup: str, link: str, how: str, jsonl_path: Path,
            log) -> tuple[Interconnect, str]:
    from microbench.interconnect_fit import describe, fit_links, provenance_text, to_interconnect  # noqa: PLC0415

    fits = fit_links(records, file=str(jsonl_path))
    for f in fits.values():
        log("  " + describe(f))
    section = to_interconnect(fits, link=link, records=records,
                              source=f"measured: {setup} (each GPU count: by_num_gpus; fits: provenance.interconnect)")
    return section, provenance_text(fits, setup=f"{setup}; link {link} ({how}); raw timings {jsonl_path.name}")


def refit_beside(measurements: Path, log=print) -> tuple[Interconnect | None, str | None]:
    """``microbench fit``: the section refitted from the ``.interconnect.jsonl`` next to the kernel
    JSONL ``measurements`` (calibrate writes them side by side); (None, None) when there is none."""
    from microbench.interconnect_fit import read_records  # noqa: PLC0415

    path = measurements.with_suffix(SUFFIX)
    if not path.is_file():
        return None, None
    records, device = read_records(path)
    prov = (device or {}).get("provenance")
    prov = prov if isinstance(prov, dict) else {}
    link = prov.get("link")
    if link not in LINKS:
        raise ConfigError(str(path), "line 1.provenance.link", f"got {link!r}; allowed: {', '.join(LINKS)}")
    log(f"interconnect: refitting {path.name}")
    return _fitted(records, setup=str(prov.get("interconnect", "measured")), link=link,
                   how=str(prov.get("link_found", "as measured")), jsonl_path=path, log=log)


def with_interconnect(cal: Calibration, section: Interconnect | None, text: str | None) -> Calibration:
    """``cal`` with the section and its ``provenance.interconnect`` (unchanged when None)."""
    if section is None:
        return cal
    return dataclasses.replace(cal, interconnect=section, provenance={**cal.provenance, "interconnect": text or ""})

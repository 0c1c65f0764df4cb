"""``microbench calibrate``'s interconnect step (microbench.interconnect_step) without GPUs: the one-GPU
path keeps the datasheet numbers in one line, the many-GPU path (its spawn replaced by canned
timings, torch.cuda by a stand-in) writes the raw timings and a measured section, a failed
measurement keeps the datasheet, and ``calibrate`` / ``microbench fit`` put the section in the YAML."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import microbench.interconnect as ic_mod
import microbench.interconnect_step as step_mod
from microbench.interconnect import cuda_plan
from microbench.interconnect_fit import bus_factor
from microbench.interconnect_step import detect_link, interconnect_step, refit_beside, with_interconnect
from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration

NVLINK = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n"
CUDA = SimpleNamespace(type="cuda")


def fake_torch(gpus: int):
    cuda = SimpleNamespace(device_count=lambda: gpus, get_device_name=lambda i: "NVIDIA H100 80GB HBM3",
                           get_device_capability=lambda i: (9, 0), empty_cache=lambda: None,
                           nccl=SimpleNamespace(version=lambda: (2, 21, 5)))
    return SimpleNamespace(__version__="2.5.1+cu124", cuda=cuda)


def canned(plan) -> list[dict]:
    """What a node with 20 us latency and 400 GB/s busbw at every count would measure."""
    recs = [{"kernel": k, "num_gpus": n, "num_bytes": s, "time_s": 2e-5 + s * bus_factor(k, n) / 4e11}
            for k in ("allreduce", "allgather") for n in plan.counts for s in plan.sizes]
    return recs + [{"kernel": "sendrecv", "num_gpus": 2, "num_bytes": s, "time_s": 1e-5 + s / 3e11}
                   for s in plan.sizes]


def dev(name: str) -> dict:
    return {"name": "h100", "gpu_name": name, "memory_bytes": 1 << 36,
            "provenance": {"date": "2026-11-30T21:00:00+00:00", "driver": "550.54.15"}}


def test_cpu_device_has_no_interconnect_step(tmp_path) -> None:
    lines = []
    out = interconnect_step(fake_torch(8), SimpleNamespace(type="cpu"), dev("CPU x"), quick=True,
                            jsonl_path=tmp_path / "a.interconnect.jsonl", log=lines.append)
    assert out == (None, None) and lines == []


def test_one_gpu_keeps_the_datasheet_in_one_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ic_mod, "measure", lambda plan: pytest.fail("nothing to time on one GPU"))
    lines = []
    section, text = interconnect_step(fake_torch(1), CUDA, dev("NVIDIA H200"), quick=True,
                                      jsonl_path=tmp_path / "a.interconnect.jsonl", log=lines.append)
    assert section == load_calibration("h200").interconnect
    assert len(lines) == 1 and "1 GPU visible" in lines[0] and "datasheet numbers of h200" in lines[0]
    assert text.startswith("not measured (1 GPU visible") and "calibrations/h200.yaml" in text
    assert not (tmp_path / "a.interconnect.jsonl").exists()


def test_one_unknown_gpu_says_there_is_no_section(tmp_path) -> None:
    lines = []
    out = interconnect_step(fake_torch(1), CUDA, dev("NVIDIA Imaginary 9000"), quick=False,
                            jsonl_path=tmp_path / "a.interconnect.jsonl", log=lines.append)
    assert out == (None, None)
    assert len(lines) == 1 and "no shipped datasheet for NVIDIA Imaginary 9000" in lines[0]


@pytest.mark.parametrize("gpus, counts", [(8, (2, 4, 8)), (6, (2, 4)), (2, (2,)), (16, (2, 4, 8))])
def test_many_gpus_measure_fit_and_keep_the_raw_timings(tmp_path, monkeypatch, gpus, counts) -> None:
    plans = []
    monkeypatch.setattr(ic_mod, "measure", lambda plan: plans.append(plan) or canned(plan))
    monkeypatch.setattr(step_mod, "_smi", lambda *a: NVLINK if a[0] == "nvlink" else "")
    lines, jsonl = [], tmp_path / "h100.interconnect.jsonl"
    section, text = interconnect_step(fake_torch(gpus), CUDA, dev("NVIDIA H100 80GB HBM3"), quick=True,
                                      jsonl_path=jsonl, log=lines.append)
    (plan,) = plans
    assert plan.backend == "nccl" and plan.counts == counts and plan.world == counts[-1]
    assert section.allreduce_bus_bandwidth_bytes_per_s == pytest.approx(4e11, rel=1e-6)
    assert section.allreduce_latency_s == pytest.approx(2e-5, rel=1e-6)
    assert section.p2p_bandwidth_bytes_per_s == pytest.approx(3e11, rel=1e-6)
    assert section.link == "nvlink4" and "NCCL 2.21.5" in section.source and "driver 550.54.15" in section.source
    assert "torch 2.5.1+cu124" in text and "2026-11-30" in text and jsonl.name in text
    assert all(f"{n} GPUs 400.0 GB/s" in text for n in counts)
    rows = [json.loads(x) for x in jsonl.read_text().splitlines()]
    assert rows[0]["record"] == "device" and rows[0]["provenance"]["link"] == "nvlink4"
    assert rows[1:] == canned(plan)
    assert lines[0].startswith("interconnect: timing NCCL") and len(lines) == 1 + 2 * len(counts) + 1
    # microbench fit refits the same section from the file next to the kernel JSONL
    again, again_text = refit_beside(tmp_path / "h100.jsonl", log=lambda _: None)
    assert again == section and again_text == text


def test_failed_measurement_keeps_the_datasheet(tmp_path, monkeypatch) -> None:
    def boom(plan):
        raise RuntimeError("NCCL error: unhandled system error\nlast line")
    monkeypatch.setattr(ic_mod, "measure", boom)
    lines = []
    section, text = interconnect_step(fake_torch(8), CUDA, dev("NVIDIA H100 80GB HBM3"), quick=False,
                                      jsonl_path=tmp_path / "a.interconnect.jsonl", log=lines.append)
    assert section == load_calibration("h100-sxm").interconnect
    assert "measurement failed (RuntimeError: last line)" in lines[-1] and "not measured" in text


def test_link_from_pcie_generation_then_datasheet(monkeypatch) -> None:
    monkeypatch.setattr(step_mod, "_smi", lambda *a: "" if a[0] == "nvlink" else "4\n")
    assert detect_link(fake_torch(2), None)[0] == "pcie4"
    monkeypatch.setattr(step_mod, "_smi", lambda *a: "")
    assert detect_link(fake_torch(2), load_calibration("rtx-4090"))[0] == "pcie4"
    assert detect_link(fake_torch(2), load_calibration("h200"))[0] == "nvlink4"


def test_section_goes_into_the_calibration_yaml(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(ic_mod, "measure", canned)
    monkeypatch.setattr(step_mod, "_smi", lambda *a: NVLINK if a[0] == "nvlink" else "")
    section, text = interconnect_step(fake_torch(8), CUDA, dev("NVIDIA H100 80GB HBM3"), quick=True,
                                      jsonl_path=tmp_path / "x.interconnect.jsonl", log=lambda _: None)
    cal = with_interconnect(load_calibration("cpu-epyc-2core"), section, text)
    back = calibration_from_dict(yaml.safe_load(yaml.safe_dump(calibration_to_dict(cal))), file="x.yaml")
    assert back.interconnect.allreduce_s(1 << 20, 8) == pytest.approx(section.allreduce_s(1 << 20, 8), rel=1e-5)
    assert back.provenance["interconnect"] == text
    assert with_interconnect(cal, None, None) is cal


def _calibrated(monkeypatch, tmp_path, measure, *, quick: bool):
    """(section, provenance text, cpu calibration with the section) of calibrate's interconnect step on
    an 8-GPU NVLink node whose NCCL timings ``measure(plan)`` returns."""
    monkeypatch.setattr(ic_mod, "measure", measure)
    monkeypatch.setattr(step_mod, "_smi", lambda *a: NVLINK if a[0] == "nvlink" else "")
    section, text = interconnect_step(fake_torch(8), CUDA, dev("NVIDIA H100 80GB HBM3"), quick=quick,
                                      jsonl_path=tmp_path / "x.interconnect.jsonl", log=lambda _: None)
    return section, text, with_interconnect(load_calibration("cpu-epyc-2core"), section, text)


def test_each_gpu_counts_numbers_go_into_the_calibration_yaml(tmp_path, monkeypatch) -> None:
    """A node whose latency and bus bandwidth change with the GPU count: calibrate's section keeps
    each count's, and the calibration read back times each count's collectives with them."""
    truth = {2: (6e-6, 2.5e11), 4: (1.1e-5, 3.2e11), 8: (2.3e-5, 4.1e11)}

    def by_count(plan) -> list[dict]:
        recs = [{"kernel": k, "num_gpus": n, "num_bytes": s,
                 "time_s": truth[n][0] * (0.8 if k == "allgather" else 1) + s * bus_factor(k, n) / truth[n][1]}
                for k in ("allreduce", "allgather") for n in plan.counts for s in plan.sizes]
        return recs + [{"kernel": "sendrecv", "num_gpus": 2, "num_bytes": s, "time_s": 1e-5 + s / 3e11}
                       for s in plan.sizes]

    section, text, cal = _calibrated(monkeypatch, tmp_path, by_count, quick=True)
    written = yaml.safe_dump(calibration_to_dict(cal))
    assert "by_num_gpus" in written and "by_num_gpus" in section.source
    back = calibration_from_dict(yaml.safe_load(written), file="x.yaml").interconnect
    assert [n for n, _ in back.by_num_gpus] == [2, 4, 8]
    size = 1 << 20
    for n, (lat, bw) in truth.items():
        assert back.allreduce_s(size, n) == pytest.approx(lat + size * bus_factor("allreduce", n) / bw, rel=1e-3)
        assert back.allgather_s(size, n) == pytest.approx(0.8 * lat + size * bus_factor("allgather", n) / bw,
                                                          rel=1e-3)
    assert back.allreduce_latency_s == pytest.approx(2.3e-5, rel=1e-3)  # the top level: the 8-GPU all-reduce


def test_each_counts_measured_all_reduce_times_go_in_as_its_curve(tmp_path, monkeypatch) -> None:
    """NCCL's mid-size all-reduces run slower than latency + bytes / bandwidth: calibrate keeps each
    count's median time at every size as its allreduce_curve, so an engine's NCCL all-reduce of a
    size timed takes what was measured, where the fitted line misses it."""
    def hump(n: int, s: int) -> float:  # a mid-size rise over the line, largest near 4 MiB
        line = 2e-5 + s * bus_factor("allreduce", n) / 4e11
        return line * (1.0 + 1.5 * math.exp(-((math.log2(s) - 22) / 3) ** 2))

    def measured(plan) -> list[dict]:
        recs = [{"kernel": "allreduce", "num_gpus": n, "num_bytes": s, "time_s": hump(n, s) * f}
                for n in plan.counts for s in plan.sizes for f in (0.9, 1.0, 1.1)]  # median: the middle one
        return recs + [{"kernel": "sendrecv", "num_gpus": 2, "num_bytes": s, "time_s": 1e-5 + s / 3e11}
                       for s in plan.sizes]

    _, text, cal = _calibrated(monkeypatch, tmp_path, measured, quick=False)
    back = calibration_from_dict(yaml.safe_load(yaml.safe_dump(calibration_to_dict(cal))), file="x.yaml").interconnect
    nccl = dataclasses.replace(back, engine_allreduce=())  # an engine that sends every size to NCCL
    sizes = cuda_plan(8, quick=False).sizes
    for n in cuda_plan(8, quick=False).counts:
        curve = back.numbers(n).allreduce_curve
        assert curve is not None and curve.sizes == tuple(float(s) for s in sizes)
        for s in sizes:
            assert nccl.allreduce_s(s, n) == pytest.approx(hump(n, s), rel=1e-5)
        worst = max(abs(back.allreduce_s(s, n) - hump(n, s)) / hump(n, s) for s in sizes)
        assert worst > 0.3  # the fitted line alone misses the hump
    assert "allreduce_curve" in text


def _calibrate_fixture(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import microbench.calibrate as calibrate_mod

    good = [{"kernel": "gemm", "m": m, "n": n, "k": 1024, "dtype": "fp16",
             "time_s": 4e-6 + max(2 * 1024 * n / 1e12, 2 * m * n * 1024 / 1e14)}
            for n in (1024, 2048, 4096) for m in (1, 16, 256, 4096)]
    good += [{"kernel": "copy_h2d", "num_bytes": b, "pinned": True, "time_s": 1e-5 + b / 2e10}
             for b in (1 << 16, 1 << 24, 1 << 28)]
    good += [{"kernel": "step", "num_seqs": s, "vocab_size": 32000, "time_s": 1e-4 + s * 1e-7} for s in (1, 8, 64)]

    def sweep(torch, device, todo, *, quick, show_progress=True, keep=None):
        for r in good:
            keep(dict(r))
        return [dict(r) for r in good]

    monkeypatch.setattr(calibrate_mod, "run_sweep", sweep)
    monkeypatch.chdir(tmp_path)


def test_calibrate_writes_the_section_and_fit_refits_it(tmp_path, monkeypatch, capsys) -> None:
    _calibrate_fixture(tmp_path, monkeypatch)
    from microbench.cli import main

    monkeypatch.setattr(ic_mod, "measure", canned)
    monkeypatch.setattr(step_mod, "_smi", lambda *a: NVLINK if a[0] == "nvlink" else "")
    real = step_mod.interconnect_step

    def on_8_gpus(torch, device, dev_, **kw):  # the CPU run, as if it had seen 8 GPUs
        return real(fake_torch(8), CUDA, {**dev_, "gpu_name": "NVIDIA H100 80GB HBM3"}, **kw)

    monkeypatch.setattr(step_mod, "interconnect_step", on_8_gpus)
    argv = ["calibrate", "--device", "cpu", "--model", "tiny-llama", "--no-progress", "--out", "m/x.yaml"]
    assert main(argv) == 0
    assert "interconnect: timing NCCL" in capsys.readouterr().out
    cal = load_calibration(str(tmp_path / "m/x.yaml"))
    assert cal.interconnect.allreduce_bus_bandwidth_bytes_per_s == pytest.approx(4e11, rel=1e-5)
    assert (tmp_path / "m/x.interconnect.jsonl").is_file()
    assert main(["fit", "m/x.jsonl", "-o", "m/y.yaml"]) == 0
    refit = load_calibration(str(tmp_path / "m/y.yaml"))
    assert refit.interconnect == cal.interconnect
    assert refit.provenance["interconnect"] == cal.provenance["interconnect"]


def test_calibrate_on_cpu_writes_no_section(tmp_path, monkeypatch) -> None:
    _calibrate_fixture(tmp_path, monkeypatch)
    from microbench.cli import main

    assert main(["calibrate", "--device", "cpu", "--model", "tiny-llama", "--no-progress", "--out", "x.yaml"]) == 0
    assert "interconnect" not in yaml.safe_load(Path("x.yaml").read_text())
    assert not Path("x.interconnect.jsonl").exists()


@pytest.mark.parametrize("major,link", [(7, "nvlink2"), (8, "nvlink3"), (9, "nvlink4"), (10, "nvlink5")])
def test_nvlink_generation_from_the_compute_capability(monkeypatch, major, link) -> None:
    monkeypatch.setattr(step_mod, "_smi", lambda *a: NVLINK if a[0] == "nvlink" else "")
    torch = fake_torch(2)
    torch.cuda.get_device_capability = lambda i: (major, 0)
    assert detect_link(torch, None)[0] == link

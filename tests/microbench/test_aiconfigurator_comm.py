"""aiconfigurator-core's all-reduce tables as interconnect curves (microbench/aiconfigurator_comm.py):
element counts become bytes and milliseconds seconds, the engine's CUDA-graph lane is kept, the
versions are picked as the kernels' were, and a count's other numbers stay. Rows are plain dicts
here, so these tests need neither pandas nor the package."""

from __future__ import annotations

import pytest

import microbench.aiconfigurator as aic
from microbench.aiconfigurator_comm import curves_of, engine_rows, import_comm, pick_version, with_comm
from sim.calib.allreduce_curve import AllReduceCurve
from sim.calib.interconnect import interconnect_from_dict


def _row(n, size, ms, kernel="vLLM_custom_graph", **kw):
    return {"num_gpus": n, "message_size": size, "latency": ms, "kernel_source": kernel,
            "allreduce_dtype": "bfloat16", **kw}


def test_rows_become_bytes_and_seconds_with_the_median_of_repeats() -> None:
    rows = [_row(8, 128, 0.0047), _row(8, 1024, 0.0046), _row(8, 1024, 0.0050), _row(8, 1024, 0.0048),
            _row(2, 128, 0.0043), _row(4, 128, None), _row(8, 0, 0.001)]
    curves = curves_of(rows)
    assert set(curves) == {8}  # 2 has one size, 4 no time: left out
    assert curves[8] == AllReduceCurve((256.0, 2048.0), (4.7e-06, 4.8e-06))


def test_the_engines_graph_lane_is_kept_and_tensorrt_llms_single_node_kernel() -> None:
    rows = [_row(2, 128, 0.02, "vLLM_custom_eager"), _row(2, 128, 0.004), _row(2, 256, 0.004),
            _row(2, 128, 0.004, allreduce_dtype="float16")]
    kept, kernel = engine_rows(rows)
    assert kernel == "vLLM_custom_graph" and len(kept) == 2
    trt = [_row(2, s, 0.01, "TRTLLM") for s in (128, 256)] + [_row(2, s, 0.01, "TRTLLM_MNNVL_oneshot")
                                                              for s in (128, 256, 512)]
    assert engine_rows(trt)[1] == "TRTLLM"


def test_the_version_is_the_kernels_or_the_newest_before_it() -> None:
    found = ["0.14.0", "0.19.0", "0.24.0"]
    assert pick_version(found, "0.19.0") == "0.19.0"
    assert pick_version(found, "0.22.0") == "0.19.0"
    assert pick_version(found, None) == "0.24.0"
    assert pick_version(found, "0.10.0") == "0.24.0"  # none before it: the newest
    assert pick_version([], "0.19.0") is None


def test_import_comm_reads_both_tables_and_with_comm_keeps_the_other_numbers(tmp_path, monkeypatch) -> None:
    comm = tmp_path / "h100_sxm" / "comm"
    for folder in ("nccl/2.29.2/nccl_perf.parquet", "vllm/0.19.0/custom_allreduce_perf.parquet",
                   "vllm/0.24.0/custom_allreduce_perf.parquet"):
        (comm / folder).parent.mkdir(parents=True, exist_ok=True)
        (comm / folder).write_bytes(b"")
    tables = {
        "nccl_perf.parquet": [{"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": 8, "message_size": s,
                               "latency": ms} for s, ms in ((1024, 0.016), (1048576, 0.038))]
        + [{"op_name": "all_gather", "nccl_dtype": "half", "num_gpus": 8, "message_size": 1024, "latency": 9.0}],
        "0.19.0": [_row(8, 128, 0.0047), _row(8, 524288, 0.015)],
        "0.24.0": [_row(8, 128, 0.0099), _row(8, 524288, 0.099)],
    }
    monkeypatch.setattr(aic, "read_table", lambda p: tables[p.name] if p.name.startswith("nccl") else tables[p.parent.name])
    curves, line = import_comm(tmp_path, "h100_sxm", "vllm", "0.19.0")
    assert curves[8]["allreduce_curve"] == AllReduceCurve((2048.0, 2097152.0), (1.6e-05, 3.8e-05))
    assert curves[8]["engine_allreduce_curve"] == AllReduceCurve((256.0, 1048576.0), (4.7e-06, 1.5e-05))
    assert "NCCL 2.29.2" in line and "vllm 0.19.0" in line and "vLLM_custom_graph" in line
    ic = interconnect_from_dict({"allreduce_bus_bandwidth_bytes_per_s": 4e11, "allreduce_latency_s": 8e-6,
                                 "link": "nvlink4", "by_num_gpus": {8: {"allreduce_latency_s": 1.2e-5},
                                                                    2: {"allreduce_latency_s": 6e-6}}}, file="x")
    new = with_comm(ic, curves)
    assert new.numbers(8).allreduce_latency_s == 1.2e-5 and new.numbers(2).allreduce_latency_s == 6e-6
    assert new.numbers(8).engine_allreduce_curve == curves[8]["engine_allreduce_curve"]
    assert new.numbers(2).allreduce_curve is None and new.allreduce_latency_s == 8e-6
    assert with_comm(None, curves) is None
    assert import_comm(tmp_path, "h200_sxm", "vllm", None) == ({}, "")


@pytest.mark.parametrize("backend", ["sglang", "trtllm"])
def test_a_backend_without_its_own_table_still_gets_nccls(tmp_path, monkeypatch, backend) -> None:
    path = tmp_path / "l40s" / "comm" / "nccl" / "2.27.3" / "nccl_perf.parquet"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    monkeypatch.setattr(aic, "read_table", lambda p: [
        {"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": 4, "message_size": s, "latency": 0.01 * s}
        for s in (1, 2)])
    curves, line = import_comm(tmp_path, "l40s", backend, None)
    assert set(curves) == {4} and set(curves[4]) == {"allreduce_curve"} and backend not in line

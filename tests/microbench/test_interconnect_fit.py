"""The interconnect fit (microbench.interconnect_fit) on synthetic timings with a known latency and
bus bandwidth per GPU count, the section it writes as sim/calib/interconnect.py reads it, and bad
records as one-line errors. No torch: the fit is numpy and scipy."""

from __future__ import annotations

import random

import pytest
import yaml

from microbench.interconnect_fit import (bus_factor, check_records, describe, fit_links, provenance_text,
                                         read_records, to_interconnect, write_records)
from sim.calib.interconnect import interconnect_from_dict, interconnect_to_dict
from sim.errors import ConfigError

SIZES = tuple(4096 * 8 ** i for i in range(7))  # 4 KiB to 1 GiB
# (kernel, n) -> (latency s, bus bandwidth B/s): what the synthetic "hardware" does
TRUTH = {("allreduce", 2): (7e-6, 3.1e11), ("allreduce", 4): (9e-6, 3.6e11), ("allreduce", 8): (14e-6, 4.5e11),
         ("allgather", 2): (6e-6, 3.0e11), ("allgather", 4): (8e-6, 3.5e11), ("allgather", 8): (11e-6, 4.2e11),
         ("sendrecv", 2): (5e-6, 3.7e11)}


def synthetic(noise: float = 0.0, seed: int = 0, truth=TRUTH) -> list[dict]:
    rng = random.Random(seed)
    recs = []
    for (kernel, n), (lat, bw) in truth.items():
        for s in SIZES:
            t = lat + s * bus_factor(kernel, n) / bw
            recs.append({"kernel": kernel, "num_gpus": n, "num_bytes": s,
                         "time_s": t * (1 + rng.uniform(-noise, noise))})
    return recs


def test_bus_factor_is_nccl_tests_convention() -> None:
    assert bus_factor("allreduce", 2) == 1.0 and bus_factor("allreduce", 8) == pytest.approx(1.75)
    assert bus_factor("allgather", 4) == pytest.approx(0.75) and bus_factor("sendrecv", 2) == 1.0


@pytest.mark.parametrize("noise", [0.0, 0.03])
def test_fit_recovers_latency_and_bandwidth_per_gpu_count(noise) -> None:
    fits = fit_links(synthetic(noise))
    assert set(fits) == set(TRUTH)
    for key, (lat, bw) in TRUTH.items():
        f = fits[key]
        tol = 1e-6 if noise == 0 else 0.06
        assert f.bandwidth_bytes_per_s == pytest.approx(bw, rel=tol)
        assert f.latency_s == pytest.approx(lat, rel=tol if noise == 0 else 0.15)
        assert f.mape <= noise + 1e-9
        assert (f.min_bytes, f.max_bytes) == (SIZES[0], SIZES[-1])
        # the fit predicts the algorithm time: a 1 GiB all-reduce over 8 GPUs moves 2*7/8 GiB per GPU
        assert f.predict(SIZES[-1]) == pytest.approx(lat + SIZES[-1] * bus_factor(*key) / bw, rel=0.06)


def test_section_takes_the_largest_gpu_count_and_reads_back() -> None:
    fits = fit_links(synthetic())
    ic = to_interconnect(fits, link="nvlink4", source="measured: test")
    assert ic.allreduce_bus_bandwidth_bytes_per_s == pytest.approx(4.5e11)
    assert ic.allreduce_latency_s == pytest.approx(14e-6)
    assert ic.p2p_bandwidth_bytes_per_s == pytest.approx(3.7e11) and ic.p2p_latency_s == pytest.approx(5e-6)
    back = interconnect_from_dict(interconnect_to_dict(ic)["interconnect"], file="x.yaml")
    assert back.allreduce_bus_bandwidth_bytes_per_s == pytest.approx(ic.allreduce_bus_bandwidth_bytes_per_s, rel=1e-5)
    assert back.link == "nvlink4" and back.source == "measured: test"
    # the reader's all-reduce time is the fitted one at the section's GPU count
    assert back.allreduce_s(1 << 24, 8) == pytest.approx(fits[("allreduce", 8)].predict(1 << 24), rel=1e-5)
    # and its point-to-point send (pipeline stages) is the fitted send/recv
    assert back.p2p_s(1 << 24) == pytest.approx(fits[("sendrecv", 2)].predict(1 << 24), rel=1e-5)


def test_section_holds_every_counts_fit_and_the_reader_uses_them() -> None:
    fits = fit_links(synthetic())
    ic = to_interconnect(fits, link="nvlink4", source="measured: test")
    written = interconnect_to_dict(ic)["interconnect"]
    assert sorted(written["by_num_gpus"]) == [2, 4, 8]
    assert written["by_num_gpus"][4]["allgather_latency_s"] == pytest.approx(8e-6, rel=1e-5)
    back = interconnect_from_dict(yaml.safe_load(yaml.safe_dump(written)), file="x.yaml")
    for n in (2, 4, 8):  # each count's collectives are its own fits, not the 8-GPU all-reduce's
        for kernel, timed in (("allreduce", back.allreduce_s), ("allgather", back.allgather_s)):
            for size in (4096, 1 << 26):
                assert timed(size, n) == pytest.approx(fits[(kernel, n)].predict(size), rel=1e-5)
    assert back.allreduce_s(4096, 2) < 0.6 * back.allreduce_s(4096, 8)  # 7 us against 14 us
    # a count not measured takes the top level: the largest count's all-reduce for both collectives
    top = fits[("allreduce", 8)]
    assert back.allreduce_s(1 << 26, 16) == pytest.approx(top.latency_s + (1 << 26) * 2 * 15 / 16
                                                          / top.bandwidth_bytes_per_s, rel=1e-5)
    assert back.allgather_s(1 << 26, 16) == pytest.approx(top.latency_s + (1 << 26) * 15 / 16
                                                          / top.bandwidth_bytes_per_s, rel=1e-5)


def test_a_count_timed_for_one_collective_leaves_the_other_to_the_top_level() -> None:
    recs = [r for r in synthetic() if r["kernel"] == "allreduce" or (r["kernel"], r["num_gpus"]) == ("allgather", 2)]
    ic = to_interconnect(fit_links(recs), link="nvlink4", source="s")
    counts = dict(ic.by_num_gpus)
    assert set(counts) == {2, 4, 8}
    assert counts[4].allgather_latency_s is None and counts[2].allgather_latency_s == pytest.approx(6e-6)
    assert "allgather_latency_s" not in interconnect_to_dict(ic)["interconnect"]["by_num_gpus"][4]
    assert ic.allgather_s(1 << 20, 4) == pytest.approx(14e-6 + (1 << 20) * 3 / 4 / 4.5e11, rel=1e-5)


def test_section_without_sendrecv_has_no_p2p_numbers() -> None:
    recs = [r for r in synthetic() if r["kernel"] == "allreduce" and r["num_gpus"] == 2]
    ic = to_interconnect(fit_links(recs), link="pcie4", source="s")
    assert ic.p2p_bandwidth_bytes_per_s is None and ic.p2p_latency_s is None
    assert "p2p_latency_s" not in interconnect_to_dict(ic)["interconnect"]


def test_provenance_names_every_count_and_the_convention() -> None:
    fits = fit_links(synthetic())
    text = provenance_text(fits, setup="8x GPU, NCCL 2.21.5")
    assert "NCCL 2.21.5" in text and "PERFORMANCE.md" in text and "2(n-1)/n" in text
    for n, bw in ((2, "310.0 GB/s"), (4, "360.0 GB/s"), (8, "450.0 GB/s")):
        assert f"{n} GPUs {bw}" in text
    assert "all-gather busbw" in text and "send/recv GPU 0 -> 1: 370.0 GB/s" in text
    assert "450.0 GB/s" in describe(fits[("allreduce", 8)]) and "14.0 us" in describe(fits[("allreduce", 8)])


def test_flat_times_are_an_error_not_an_infinite_bandwidth() -> None:
    recs = [{"kernel": "allreduce", "num_gpus": 2, "num_bytes": s, "time_s": 1e-5} for s in (4096, 65536)]
    with pytest.raises(ConfigError, match="no size was bandwidth-bound"):
        fit_links(recs)
    with pytest.raises(ConfigError, match="at least two message sizes"):
        fit_links(recs[:1])


@pytest.mark.parametrize("bad, key", [
    ({"kernel": "broadcast"}, "record 1.kernel"),
    ({"num_gpus": 1}, "record 1.num_gpus"),
    ({"num_bytes": 0}, "record 1.num_bytes"),
    ({"num_bytes": 1.5}, "record 1.num_bytes"),
    ({"time_s": 0.0}, "record 1.time_s"),
    ({"time_s": float("nan")}, "record 1.time_s"),
    ({"time_s": True}, "record 1.time_s"),
])
def test_bad_records_are_one_line_errors(bad, key) -> None:
    rec = {"kernel": "allreduce", "num_gpus": 2, "num_bytes": 4096, "time_s": 1e-5, **bad}
    with pytest.raises(ConfigError) as err:
        check_records([rec], file="m.jsonl")
    assert err.value.file == "m.jsonl" and err.value.key == key and "\n" not in str(err.value)


def test_records_round_trip_through_jsonl(tmp_path) -> None:
    recs = synthetic()
    path = tmp_path / "x.interconnect.jsonl"
    write_records(path, recs, {"name": "gpu", "provenance": {"link": "nvlink4"}})
    back, device = read_records(path)
    assert back == recs and device["provenance"]["link"] == "nvlink4" and device["record"] == "device"
    path.write_text("{not json\n")
    with pytest.raises(ConfigError, match="line 1: not JSON"):
        read_records(path)

"""The interconnect timing code (microbench.interconnect) for real, on two CPU processes over gloo:
the same spawn, rendezvous, groups, timing loop and result checks the NCCL run uses, at tiny
sizes; then its records through the fit into a calibration YAML that the simulator reads."""

from __future__ import annotations

import pytest
import yaml

from microbench.interconnect import Plan, cuda_plan, gpu_counts, measure
from microbench.interconnect_fit import fit_links, to_interconnect
from microbench.interconnect_step import with_interconnect
from sim.calib.calibration import calibration_from_dict, calibration_to_dict, load_calibration

torch = pytest.importorskip("torch")
SIZES = (4096, 65536, 1 << 20, 16 << 20)


def test_grid_counts_are_powers_of_two_up_to_eight() -> None:
    assert gpu_counts(1) == () and gpu_counts(2) == (2,) and gpu_counts(7) == (2, 4)
    assert gpu_counts(8) == (2, 4, 8) and gpu_counts(64) == (2, 4, 8)
    full, quick = cuda_plan(8, False), cuda_plan(8, True)
    assert full.world == 8 and full.backend == "nccl" and full.sizes[0] <= 4096 and full.sizes[-1] >= 1 << 28
    assert len(quick.sizes) < len(full.sizes) and quick.repeats <= full.repeats


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="this torch build has no torch.distributed gloo backend")
def test_two_gloo_processes_time_fit_and_write_a_section() -> None:
    plan = Plan("gloo", world=2, counts=(2,), sizes=SIZES, repeats=3, target_s=0.002, warmup=1, timeout_s=120)
    recs = measure(plan)
    assert [(r["kernel"], r["num_bytes"]) for r in recs] == [(k, s) for k in ("allreduce", "allgather", "sendrecv")
                                                            for s in SIZES]
    for r in recs:
        assert r["num_gpus"] == 2 and r["backend"] == "gloo" and r["dtype"] == "float32"
        assert 0 < r["p20_s"] <= r["time_s"] <= r["p80_s"] and r["repeats"] == 3 and r["iters"] >= 1
    fits = fit_links(recs)
    assert set(fits) == {("allreduce", 2), ("allgather", 2), ("sendrecv", 2)}
    ic = to_interconnect(fits, link="pcie4", source="measured: gloo on 2 CPU processes (test)")
    cal = with_interconnect(load_calibration("cpu-epyc-2core"), ic, "gloo test")
    back = calibration_from_dict(yaml.safe_load(yaml.safe_dump(calibration_to_dict(cal))), file="x.yaml")
    assert back.interconnect.allreduce_bus_bandwidth_bytes_per_s == pytest.approx(
        fits[("allreduce", 2)].bandwidth_bytes_per_s, rel=1e-5)
    assert back.interconnect.p2p_latency_s == pytest.approx(fits[("sendrecv", 2)].latency_s, rel=1e-5, abs=1e-12)
    # each fit is of its own records (its MAPE is theirs; no bound on it: 2 shared cores are noisy)
    for (kernel, n), f in fits.items():
        mine = [r for r in recs if r["kernel"] == kernel]
        assert f.mape == pytest.approx(sum(abs(f.predict(r["num_bytes"]) - r["time_s"]) / r["time_s"]
                                           for r in mine) / len(mine), rel=1e-6)
        assert (f.min_bytes, f.max_bytes) == (SIZES[0], SIZES[-1])

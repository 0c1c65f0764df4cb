"""Step time under tensor parallelism: sharded kernels plus the interconnect's collectives."""

from __future__ import annotations

import dataclasses

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.build import build_cost_model, build_profiled_cost
from sim.cost.collectives import slowest_rank_wait_s
from sim.cost.datasheet import DatasheetCost
from sim.cost.fitted import FittedCost
from sim.cost.profile import PROFILES, ProfileName
from sim.cost.shape import BatchShape
from sim.errors import ConfigError
from sim.model.hf_config import load_model

SHAPES = [BatchShape.decode(1, 128), BatchShape.decode(64, 2000), BatchShape.prefill(512, 1024),
          BatchShape(num_seqs=9, num_prefill_tokens=300, num_decode_tokens=8, decode_kv_tokens=9000,
                     prefill_attn_pairs=60000.0, prefill_kv_tokens=700, num_prefill_seqs=1)]


@pytest.mark.parametrize("cal_name", ["h100-sxm", "a100-vidur-linear", "cpu-epyc-2core"])
def test_tp_1_is_the_single_gpu_model(cal_name: str) -> None:
    model, cal = load_model("llama-3-8b"), load_calibration(cal_name)
    plain, one = build_cost_model(model, cal), build_cost_model(model, cal, tensor_parallel_size=1)
    assert plain == one and one.collectives is None
    for shape in SHAPES:
        assert plain.step_time_s(shape) == one.step_time_s(shape)


def _allreduces_s(model, cal, tp: int, m: int, seqs: int) -> float:
    ic = cal.interconnect
    act = 2
    reduce = ic.allreduce_s(m * model.hidden_size * act, tp) + cal.kernel_launch_s
    gather = ic.allgather_s(seqs * model.vocab_size * act, tp) + cal.kernel_launch_s
    return (2 * model.num_layers + 1) * (reduce + slowest_rank_wait_s(tp)) + gather


def test_memory_bound_decode_at_tp_2_is_half_plus_the_all_reduces() -> None:
    """The issue's sanity target: a batch-1 decode of a 70B model streams its weights; over 2
    GPUs each streams half of them, then the all-reduces are added."""
    model = load_model("llama-3-70b")
    cal = dataclasses.replace(load_calibration("h100-sxm"), step_overhead_s=0.0)  # no per-step host time
    shape = BatchShape.decode(1, 1024)
    t1 = build_cost_model(model, cal).step_time_s(shape)
    t2 = build_cost_model(model, cal, tensor_parallel_size=2).step_time_s(shape)
    comm = _allreduces_s(model, cal, 2, 1, 1)
    launches = 80 * (4 + 6) * cal.kernel_launch_s + cal.kernel_launch_s  # per-GPU kernels are not halved
    assert t2 - comm - launches == pytest.approx((t1 - launches) / 2, rel=0.03)
    assert 0.5 * t1 < t2 < 0.62 * t1


def test_collectives_are_counted_exactly() -> None:
    model, cal = load_model("llama-3-8b"), load_calibration("a100-80gb")
    cm: DatasheetCost = build_cost_model(model, cal, tensor_parallel_size=4)
    no_comm = dataclasses.replace(cm, collectives=None)
    for shape in SHAPES:
        expected = _allreduces_s(model, cal, 4, shape.num_tokens, shape.num_seqs)
        assert cm.step_time_s(shape) - no_comm.step_time_s(shape) == pytest.approx(expected, rel=1e-9)


def test_large_prefill_all_reduce_is_bandwidth_bound() -> None:
    """8192 tokens x 8192 hidden x 2 bytes = 128 MiB per all-reduce: far past the latency."""
    cal = load_calibration("h100-sxm")
    ic = cal.interconnect
    nbytes = 8192 * 8192 * 2
    t = ic.allreduce_s(nbytes, 8)
    assert t == pytest.approx(ic.allreduce_latency_s + 2 * 7 / 8 * nbytes / ic.allreduce_bus_bandwidth_bytes_per_s)
    assert t > 50 * ic.allreduce_latency_s
    assert ic.allreduce_s(8192 * 2, 8) < 1.1 * ic.allreduce_latency_s  # one decode token: latency-bound


def test_pcie_card_pays_more_for_its_all_reduces_than_nvlink() -> None:
    model = load_model("llama-3-8b")
    shape = BatchShape.prefill(2048)
    extra = {}
    for name in ("h100-sxm", "l40s"):
        cal = load_calibration(name)
        tp2 = build_cost_model(model, cal, tensor_parallel_size=2)
        extra[name] = tp2.step_time_s(shape) - dataclasses.replace(tp2, collectives=None).step_time_s(shape)
    assert extra["l40s"] > 10 * extra["h100-sxm"]


def test_fitted_cost_adds_the_collectives_after_the_composition() -> None:
    model, cal = load_model("llama-3-8b"), load_calibration("a100-vidur-linear")
    one: FittedCost = build_cost_model(model, cal)
    two: FittedCost = build_cost_model(model, cal, tensor_parallel_size=2)
    assert isinstance(two, FittedCost) and two.collectives is not None
    qkv = (32 // 2 + 2 * 8 // 2) * 128  # column-parallel: each GPU's q, k and v heads
    assert two.dense_ops[0] == (qkv, 4096, 32) and one.dense_ops[0] == (2 * qkv, 4096, 32)
    assert two.lm_head == (128256 // 2, 4096)
    shape = BatchShape.decode(32, 1000)
    comm = _allreduces_s(model, cal, 2, 32, 32)
    no_comm = dataclasses.replace(two, collectives=None).step_time_s(shape)
    assert two.step_time_s(shape) == pytest.approx(no_comm + comm, rel=1e-9)
    assert no_comm < one.step_time_s(shape)


def test_graph_replays_hide_the_collectives_launches_not_their_latency() -> None:
    model, cal = load_model("llama-3-8b"), load_calibration("h100-sxm")
    cost = build_profiled_cost(model, cal, PROFILES[ProfileName.VLLM_V1], max_num_seqs=256, tensor_parallel_size=2)
    fixed = cost.graph.collectives[1]  # the host's launch is gone; the GPU's gap between kernels is not
    assert fixed == pytest.approx(cal.interconnect.allreduce_latency_s + PROFILES[ProfileName.VLLM_V1].graph_kernel_s)
    assert cost.eager.collectives[1] == cal.interconnect.allreduce_latency_s + cal.kernel_launch_s
    assert fixed < cost.eager.collectives[1]


@pytest.mark.parametrize("cal_name", ["cpu-epyc-2core"])
def test_tp_without_an_interconnect_names_the_calibration(cal_name: str) -> None:
    cal = load_calibration(cal_name)
    assert cal.interconnect is None
    with pytest.raises(ConfigError) as err:
        build_cost_model(load_model("llama-3-8b"), cal, tensor_parallel_size=2)
    assert err.value.key == "interconnect" and err.value.file.endswith(f"{cal_name}.yaml")
    assert "tensor_parallel_size 2" in err.value.message

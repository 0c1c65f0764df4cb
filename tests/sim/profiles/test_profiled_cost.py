"""Engine profiles around the cost model (sim/cost/profile.py): graphs, padding, host time."""

from __future__ import annotations

import dataclasses

import pytest

from sim.calib.calibration import load_calibration
from sim.cost.build import build_cost_model, build_profiled_cost
from sim.cost.profile import GRAPH_KERNEL_S, PROFILES, GraphMode, vllm_capture_sizes, v0_capture_sizes
from sim.cost.profiled import ProfiledCost
from sim.cost.shape import BatchShape
from sim.model.hf_config import load_model

MODEL = load_model("llama-3-8b")
CAL = load_calibration("h100-sxm")


def cost(profile: str, max_num_seqs: int = 256, **overrides):
    return build_profiled_cost(MODEL, CAL, PROFILES[profile].with_overrides(overrides), max_num_seqs=max_num_seqs)


def test_vllms_capture_sizes_follow_its_rule() -> None:
    sizes = vllm_capture_sizes(256)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-1] == 512 and 248 in sizes and 264 not in sizes
    assert all(b % 16 == 0 for b in sizes if b >= 256)
    assert vllm_capture_sizes(4) == (1, 2, 4, 8)  # min(2 x max_num_seqs, 512)
    assert v0_capture_sizes(256)[-1] == 256 and v0_capture_sizes(20) == (1, 2, 4, 8, 16, 24)


def test_eager_is_the_plain_cost_model() -> None:
    plain = build_cost_model(MODEL, CAL)
    assert cost("eager") == plain  # not wrapped: the same numbers as ever


def test_a_graph_replay_hides_the_launches_and_the_fixed_step_overhead() -> None:
    shape = BatchShape.decode(1, 1000)
    eager, v1 = cost("eager").step_time_s(shape), cost("vllm-v1").step_time_s(shape)
    launches = CAL.kernel_launch_s * MODEL.num_layers * 6
    assert v1 < eager - launches  # the launches and the calibration's 2 ms overhead are gone
    p = PROFILES["vllm-v1"]
    floor = cost("vllm-v1").graph.step_time_s(shape)
    assert p.async_scheduling  # current vLLM's default: the host's time hides behind the device's
    assert v1 == pytest.approx(max(floor, p.step_host_s + p.seq_host_s))
    serial = cost("vllm-v1", async_scheduling=False).step_time_s(shape)  # vLLM 0.11 and before
    assert serial == pytest.approx(floor + p.step_host_s + p.seq_host_s)


def test_a_replayed_kernel_costs_the_gpu_graph_kernel_s() -> None:
    """Graphs hide the host's launches, not the GPU's gap between kernels (GRAPH_KERNEL_S): the graph
    replay of a decode step costs graph_kernel_s for every kernel the eager step launches."""
    shape = BatchShape.decode(8, 8 * 500)
    assert PROFILES["vllm-v1"].graph_kernel_s == GRAPH_KERNEL_S > 0
    free = cost("vllm-v1", graph_kernel_s=0.0).graph.step_time_s(shape)
    paid = cost("vllm-v1").graph.step_time_s(shape)
    no_host = dataclasses.replace(CAL, step_overhead_s=0.0)
    launched, unlaunched = (build_cost_model(MODEL, dataclasses.replace(no_host, kernel_launch_s=x)).step_time_s(shape)
                            for x in (CAL.kernel_launch_s, 0.0))
    kernels = (launched - unlaunched) / CAL.kernel_launch_s
    assert kernels >= 10 * MODEL.num_layers  # 4 GEMMs, 2 norms, RoPE, activation, KV write, attention a layer
    assert paid - free == pytest.approx(kernels * GRAPH_KERNEL_S, rel=1e-6)
    assert free < paid < cost("vllm-v1").eager.step_time_s(shape)


def test_a_decode_batch_is_padded_to_the_next_captured_size() -> None:
    c = cost("vllm-v1", step_host_s=0.0, seq_host_s=0.0)
    assert isinstance(c, ProfiledCost)
    t = {n: c.step_time_s(BatchShape.decode(n, 100)) for n in (9, 16)}
    padded = c.graph.step_time_s(BatchShape(num_seqs=16, num_prefill_tokens=0, num_decode_tokens=16,
                                            decode_kv_tokens=900, prefill_attn_pairs=0, prefill_kv_tokens=0,
                                            num_prefill_seqs=0))
    assert t[9] == pytest.approx(padded)  # 9 sequences run the graph captured for 16
    # beyond the largest captured size the step runs eagerly, with its launches
    big = BatchShape.decode(600, 500)
    assert c.step_time_s(big) == pytest.approx(c.eager.step_time_s(big))


def test_piecewise_graphs_serve_mixed_steps_up_to_the_largest_size() -> None:
    v1 = cost("vllm-v1", step_host_s=0.0, seq_host_s=0.0)
    v0 = cost("vllm-v0", step_host_s=0.0, seq_host_s=0.0, frontend_token_s=0.0)
    mixed = BatchShape(num_seqs=5, num_prefill_tokens=200, num_decode_tokens=4, decode_kv_tokens=4000,
                       prefill_attn_pairs=200 * 100.5, prefill_kv_tokens=200, num_prefill_seqs=1)
    assert v1.step_time_s(mixed) < v0.step_time_s(mixed)  # v0 runs mixed steps eagerly
    assert v0.step_time_s(mixed) == pytest.approx(v0.eager.step_time_s(mixed))
    prefill = BatchShape.prefill(4000)  # more tokens than any captured size: eager in both
    assert v1.step_time_s(prefill) == pytest.approx(v1.eager.step_time_s(prefill))


def test_async_scheduling_overlaps_host_and_device() -> None:
    shape = BatchShape.decode(64, 64 * 500)
    sync = cost("vllm-v1", step_host_s=2e-3, seq_host_s=0.0, async_scheduling=False)
    overlapped = cost("vllm-v1", step_host_s=2e-3, seq_host_s=0.0, async_scheduling=True)
    device = sync.device_time_s(shape)
    assert sync.step_time_s(shape) == pytest.approx(device + 2e-3)
    assert overlapped.step_time_s(shape) == pytest.approx(max(device, 2e-3))
    slow_host = cost("vllm-v1", step_host_s=1.0, seq_host_s=0.0, async_scheduling=True)
    assert slow_host.step_time_s(shape) == pytest.approx(1.0)  # host-bound: the host's time


def test_inline_output_processing_charges_each_sequence_in_the_step() -> None:
    a = cost("vllm-v0", frontend_token_s=0.0)
    b = cost("vllm-v0", frontend_token_s=1e-4)
    shape = BatchShape.decode(32, 32 * 100)
    assert b.step_time_s(shape) - a.step_time_s(shape) == pytest.approx(32 * 1e-4)


def test_no_graphs_means_launches_but_still_the_profiles_host_time() -> None:
    c = cost("vllm-v1", graph_mode="none", step_host_s=1e-3, seq_host_s=0.0, async_scheduling=False)
    shape = BatchShape.decode(1, 100)
    no_host = build_cost_model(MODEL, dataclasses.replace(CAL, step_overhead_s=0.0))
    assert c.step_time_s(shape) == pytest.approx(no_host.step_time_s(shape) + 1e-3)
    assert PROFILES["vllm-v1"].with_overrides({"graph_mode": "none"}).graph_mode is GraphMode.NONE


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_profile_is_monotone_in_the_batch(profile) -> None:
    c = cost(profile)
    times = [c.step_time_s(BatchShape.decode(n, 1000 * n)) for n in (1, 2, 8, 64, 256, 1024)]
    assert all(t > 0 for t in times)
    # padding to captured sizes can make neighbours equal, never a bigger batch faster
    assert times == sorted(times)
    assert c.step_time_s(BatchShape.decode(0, 0)) == 0.0


def test_trtllm_pytorch_is_trtllm_with_the_python_loops_per_sequence_time() -> None:
    """TensorRT-LLM's PyTorch backend: trtllm's kernels, graphs and admission; its Python executor
    pays the Python engines' per-sequence host time, which binds once a big batch's device step is short."""
    cpp, py = PROFILES["trtllm"], PROFILES["trtllm-pytorch"]
    same = {f.name for f in dataclasses.fields(cpp)} - {"name", "seq_host_s", "frontend_chat_request_s"}
    assert all(getattr(cpp, f) == getattr(py, f) for f in same)
    assert cpp.seq_host_s == 0.0 and py.seq_host_s == PROFILES["vllm-v1"].seq_host_s > 0
    # trtllm-serve's chat route was measured on the PyTorch backend only (fit_chat_route.py)
    assert cpp.frontend_chat_request_s == 0.0 < py.frontend_chat_request_s
    small = BatchShape.decode(4, 500)
    assert cost("trtllm-pytorch").step_time_s(small) == cost("trtllm").step_time_s(small)  # device-bound
    big = BatchShape.decode(2048, 100)
    c = cost("trtllm-pytorch", max_num_seqs=2048)
    host = py.step_host_s + py.seq_host_s * 2048
    assert c.device_time_s(big) < host  # a short device step: the Python loop binds
    assert c.step_time_s(big) == pytest.approx(host)
    assert c.step_time_s(big) > cost("trtllm", max_num_seqs=2048).step_time_s(big)


def test_attention_data_parallel_host_time_is_one_ranks() -> None:
    """Under attention data parallelism each rank's loop schedules its own requests: the host time of
    a step counts the busiest rank's ceil share of the sequences; pure decode (macro-steps) agrees."""
    model, cal = load_model("qwen3-235b-a22b"), load_calibration("b200")
    profile = PROFILES["trtllm-pytorch"].with_overrides({"async_scheduling": False})
    dp = build_profiled_cost(model, cal, profile, max_num_seqs=4096, tensor_parallel_size=8,
                             attention_data_parallel=True)
    tp = build_profiled_cost(model, cal, profile, max_num_seqs=4096, tensor_parallel_size=8)
    for n in (1, 8, 9, 100, 3000):
        shape = BatchShape.decode(n, 300)
        ranks_share = -(-n // 8)
        assert dp.host_time_s(shape) == pytest.approx(profile.step_host_s + profile.seq_host_s * ranks_share)
        assert tp.host_time_s(shape) == pytest.approx(profile.step_host_s + profile.seq_host_s * n)
        fn = dp.decode_time_fn(n, n)
        assert fn(shape.decode_kv_tokens) == dp.step_time_s(shape)

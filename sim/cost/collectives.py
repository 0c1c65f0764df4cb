"""A tensor-parallel step's collectives: how long its all-reduces and the logits all-gather take.

A step over ``tp`` GPUs of m tokens runs ``2 x layers + 1`` all-reduces of the hidden states
(after attention and after the MLP of every layer, and the embedding's), each of
m x hidden x activation bytes, and gathers the logits (vocabulary x activation bytes a row).
Each collective takes the interconnect's latency plus its bytes over the bus bandwidth, plus a
kernel launch (sim/calib/interconnect.py), so the step's collectives are linear in m; where the
calibration measured NCCL's times for ``tp`` GPUs and the engine sends a message of that size to
NCCL (``Interconnect.nccl_curve``), each all-reduce takes the measured curve's time instead
(sim/calib/allreduce_curve.py); where it measured the engine's own kernel too
(``Interconnect.engine_curve``), the messages below the engine's bound take that curve.

Beyond its kernel, each all-reduce waits for the slowest rank: the ranks reach it at times that
vary (their launches, clocks and kernels differ a little), and the collective starts when the last
one arrives. With each rank's lag exponential of mean ``TP_RANK_JITTER_S``, the latest of ``tp``
lags exceeds one rank's by ``TP_RANK_JITTER_S x (H(tp) - 1)`` on average (H the harmonic number:
0.5, 1.08, 1.72 at TP 2, 4, 8), charged on every all-reduce of a step. Pure.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.calib.allreduce_curve import AllReduceCurve
from sim.calib.interconnect import require_interconnect
from sim.model.spec import ModelSpec

MiB = 1 << 20
#: Engines' own all-reduce kernels (EngineProfile.custom_allreduce_bytes): ((largest GPU count, bytes), ...);
#: a message over n GPUs below the bytes of the first entry whose count is >= n runs the engine's kernel,
#: any other NCCL (sim/calib/interconnect.py). TensorRT-LLM's AUTO strategy, v0.13.0 to 0.17
#: (cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp, selectImplementation at 201135e): ONESHOT
#: below 16,000,000 bytes at 2 GPUs (its workspace), 1,000,000 at 3-4 and 500,000 at more; NCCL above
#: (TWOSHOT is off, nvbug 4718747).
TRTLLM_CUSTOM_ALLREDUCE = ((2, 16e6), (4, 1e6), (8, 5e5))
#: vLLM's custom all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py: world sizes
#: 2, 4, 6 and 8, messages below max_size = 8 MiB; NCCL above and beyond 8 GPUs), which SGLang adapted.
#: Recent vLLM on Hopper with symmetric memory raises the bound at 2 and 4 GPUs (64 and 32 MiB): not modelled.
VLLM_CUSTOM_ALLREDUCE = ((8, 8.0 * MiB),)
#: PyTorch's IntraNodeComm, which gpt-fast's tensor-parallel command turns on (its README: ``ENABLE_INTRA_NODE_COMM=1
#: torchrun ... generate.py``): one-shot below 256 KiB, two-shot up to 10 MiB (torch/csrc/distributed/c10d
#: intra_node_comm: kTwoShotThreshBytes, kMaxDevices 8), on fully connected or hybrid-cube-mesh NVLink; NCCL above.
TORCH_INTRA_NODE_ALLREDUCE = ((8, 10.0 * MiB),)
#: Mean lag of one rank's arrival at an all-reduce (module docstring), fitted on the train side's
#: tensor-parallel cases at batch <= 64 (benchmarks/published/fit_lmdeploy.py; fits.yaml tp_rank_jitter).
TP_RANK_JITTER_S = 1.5e-6


def slowest_rank_wait_s(tp: int, jitter_s: float | None = None) -> float:
    """What an all-reduce over ``tp`` ranks waits for the last of them beyond one rank's own lag:
    ``jitter_s x (H(tp) - 1)`` (module docstring; ``TP_RANK_JITTER_S`` unless given); 0.0 for one GPU."""
    return (TP_RANK_JITTER_S if jitter_s is None else jitter_s) * sum(1.0 / k for k in range(2, tp + 1))


def custom_allreduce_bound(max_bytes: float) -> tuple[tuple[int, float], ...]:
    """The engine-kernel bounds of ``engine.profile_overrides.custom_allreduce_max_bytes``: its own kernel below
    ``max_bytes`` on up to 8 GPUs (every engine's custom all-reduce stops there), NCCL above; 0: NCCL always."""
    return ((8, float(max_bytes)),) if max_bytes > 0 else ()


class NcclPath(NamedTuple):
    """The all-reduces timed by a measured curve: NCCL's from ``min_bytes`` on (``Collectives.nccl``),
    or the engine's own kernel's below it (``Collectives.engine``)."""

    bytes_per_token: float  # one all-reduce's bytes per token of the step
    min_bytes: float  # the smallest message NCCL runs: the engine's own kernel below
    curve: AllReduceCurve
    seconds_per_byte: float  # beyond the curve's last point
    launch_s: float  # the kernel launch each all-reduce pays on top
    floor_s: float = 0.0  # the count's all-reduce latency: the curve's floor below its first point


class Collectives(NamedTuple):
    """A step's collectives (module docstring); the linear form's numbers, and the NCCL curve's."""

    count: int  # all-reduces per step
    fixed_s: float  # each one's latency and launch
    per_token_s: float  # each one's seconds per token
    gather_fixed_s: float  # the logits all-gather's latency and launch
    gather_per_seq_s: float  # its seconds per row
    nccl: NcclPath | None = None
    engine: NcclPath | None = None  # the engine's own kernel's measured curve, below its ``min_bytes``
    wait_s: float = 0.0  # each all-reduce's wait for the slowest rank (``slowest_rank_wait_s``)


def collectives_s(collectives: Collectives, m: int, num_seqs: int) -> float:
    """Seconds of a step's tensor-parallel collectives (``build_collectives``) for m tokens."""
    count, fixed_s, per_token_s, gather_fixed_s, gather_per_seq_s, nccl, own, wait_s = collectives
    if nccl is not None and m * nccl.bytes_per_token >= nccl.min_bytes:
        t = count * (nccl.curve.seconds(m * nccl.bytes_per_token, nccl.seconds_per_byte, nccl.floor_s) + nccl.launch_s)
    elif own is not None and m * own.bytes_per_token < own.min_bytes:
        t = count * (own.curve.seconds(m * own.bytes_per_token, own.seconds_per_byte, own.floor_s) + own.launch_s)
    else:
        t = count * (fixed_s + m * per_token_s)
    if wait_s > 0.0:
        t += count * wait_s
    return t + gather_fixed_s + num_seqs * gather_per_seq_s if num_seqs > 0 else t


def build_collectives(model: ModelSpec, calibration, tp: int, act_bytes: float,
                      launch_s: float, attention_dp: bool = False) -> Collectives | None:
    """The collectives of one step of ``model`` (the whole model, not a shard) over ``tp`` GPUs,
    as ``collectives_s`` reads them (module docstring); None for one GPU. ConfigError naming the
    calibration's ``interconnect`` when it has none. ``attention_dp``: an all-gather of the tokens
    before each MLP and a reduce-scatter after it, together one all-reduce's bytes, replace the
    two all-reduces of a layer (timed by the linear form: no curve measures that pair)."""
    ic = require_interconnect(calibration, tp)
    if ic is None:
        return None
    per_byte = ic.allreduce_s_per_byte(tp)
    per_token = model.hidden_size * act_bytes * per_byte * (0.5 if attention_dp else 1.0)
    per_seq = model.vocab_size * act_bytes * ic.allgather_s_per_byte(tp)
    # the tp-GPU latencies (interconnect.by_num_gpus, else the top level): #15 loose ends
    fixed, gather_fixed = ic.allreduce_latency(tp) + launch_s, ic.allgather_latency(tp) + launch_s
    found = None if attention_dp else ic.nccl_curve(tp)
    nccl = None if found is None else NcclPath(model.hidden_size * act_bytes, found[1], found[0], per_byte, launch_s,
                                               ic.allreduce_latency(tp))
    mine = None if attention_dp else ic.engine_curve(tp)
    own = None if mine is None else NcclPath(model.hidden_size * act_bytes, mine[1], mine[0], per_byte, launch_s,
                                             ic.allreduce_latency(tp))
    return Collectives(2 * model.num_layers + 1, fixed, per_token, gather_fixed, per_seq, nccl, own,
                       slowest_rank_wait_s(tp))


__all__ = ["TORCH_INTRA_NODE_ALLREDUCE", "TP_RANK_JITTER_S", "TRTLLM_CUSTOM_ALLREDUCE", "VLLM_CUSTOM_ALLREDUCE", "Collectives", "NcclPath",
           "build_collectives", "collectives_s", "custom_allreduce_bound", "slowest_rank_wait_s"]

"""The measured NCCL all-reduce curves on the path a user walks: `sim run` of a 70B model over 4
and 8 A100s under TensorRT-LLM's profile, report on. The shipped a100-80gb calibration carries a
curve at 2, 4 and 8 GPUs (the 4-GPU one from 2 MiB, extended below along its first two points);
the engine's one-shot kernel times small decode all-reduces, so sending every size to NCCL instead
(``custom_allreduce_max_bytes: 0``) must slow decode down by about the curve's time over the
one-shot form at those sizes, and both runs account for every request."""

from __future__ import annotations

from pathlib import Path

import pytest

from userpath import REPO, check_report, summary_of
from sim.calib.calibration import load_calibration
from sim.cli.main import main
from sim.model.hf_config import load_model

ARGS = ["--set", "gpu=a100-80gb", "--set", "model=llama-3-70b",
        "--set", "engine.profile=trtllm", "--set", "workload.num_requests=60",
        "--set", "workload.arrival.rate=0.5"]  # light load: small decode batches, one-shot-sized messages


def _run(out: Path, tp: int, *extra: str) -> dict:
    args = [*ARGS, "--set", f"engine.tensor_parallel_size={tp}", *extra]
    assert main(["run", str(REPO / "scenarios" / "chatbot.yaml"), "--out", str(out), "--quiet", *args]) == 0
    summary = summary_of(out)
    req = summary["requests"]
    assert req["arrived"] == req["completed"] + req["rejected"] + req["in_flight"] == 60
    assert req["completed"] == 60
    return summary


@pytest.mark.parametrize("tp", [4, 8])
def test_a_tensor_parallel_run_takes_the_curve_where_the_engine_runs_nccl(tmp_path: Path, tp: int) -> None:
    one_shot = _run(tmp_path / "one-shot", tp)
    nccl = _run(tmp_path / "nccl", tp, "--set", "engine.profile_overrides.custom_allreduce_max_bytes=0")
    check_report(tmp_path / "nccl" / "report.html", "a100-80gb")
    ic, model = load_calibration("a100-80gb").interconnect, load_model("llama-3-70b")
    curve, per_byte, latency = ic.numbers(tp).allreduce_curve, ic.allreduce_s_per_byte(tp), ic.allreduce_latency(tp)
    slower = nccl["tpot_s"]["p50"] - one_shot["tpot_s"]["p50"]
    # NCCL's time over the one-shot kernel's, for every all-reduce of a decode step of 1-16 sequences
    extra = [(2 * model.num_layers + 1) * (curve.seconds(b, per_byte, latency) - latency - b * per_byte)
             for b in (n * model.hidden_size * 2 for n in range(1, 17))]
    assert min(extra) > 0 and 0.8 * min(extra) < slower < 1.2 * max(extra)

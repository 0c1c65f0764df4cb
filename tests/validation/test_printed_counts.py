"""`sim validate` says what happened in both engines: every kind of preemption (a swap run's
are swaps, not recomputes), what they moved, and how many requests each engine finished."""

from __future__ import annotations

import json
import re

import pytest

from validation.compare import COUNTED_PREEMPTIONS, summary_errors


def _summary(*, recompute=0, swap=0, completed=10, rejected=0, swap_bytes=0) -> dict:
    q = {"mean": 1.0, "p50": 1.0, "p90": 2.0, "p99": 3.0}
    return {"ttft_s": q, "tpot_s": q, "e2e_s": q,
            "throughput": {"requests_per_s": 1.0, "output_tokens_per_s": 10.0},
            "kv": {"peak_used_fraction": 0.5},
            "requests": {"arrived": completed + rejected, "completed": completed, "rejected": rejected},
            "preemptions": {"recompute": recompute, "swap": swap, "swap_fallback_to_recompute": 0,
                            "recomputed_tokens": 7 * recompute, "swap_out_bytes": swap_bytes,
                            "swap_in_bytes": swap_bytes}}


def test_summary_errors_keep_every_kind_of_preemption_and_the_request_counts() -> None:
    ol = summary_errors(_summary(swap=4, swap_bytes=2**20), _summary(swap=3, recompute=1, completed=9, rejected=1))
    assert ol["preemptions_swap"] == {"real": 4, "sim": 3}
    assert ol["preemptions_recompute"] == {"real": 0, "sim": 1}
    assert ol["preemptions_recomputed_tokens"] == {"real": 0, "sim": 7}
    assert ol["preemptions_swap_out_bytes"] == {"real": 2**20, "sim": 0}
    assert ol["completed"] == {"real": 10, "sim": 9} and ol["rejected"] == {"real": 0, "sim": 1}
    assert all(f"preemptions_{k}" in ol for k in COUNTED_PREEMPTIONS)


def _row(printed: str, label: str) -> list[str]:
    line = next(line for line in printed.splitlines() if f" {label} " in line)
    return [c.strip() for c in line.strip("│┃ ").split("│")][1:]


def test_the_printed_table_shows_swaps_and_different_completion_counts(tmp_path, capsys) -> None:
    from validation.cli import _print

    ol = summary_errors(_summary(swap=4, swap_bytes=3 * 2**20), _summary(swap=4, completed=9, swap_bytes=2**20))
    _print({"open_loop": ol, "wall_s": 1.0}, tmp_path)
    printed = capsys.readouterr().out
    assert _row(printed, "preemptions: swap") == ["4", "4"]
    assert _row(printed, "preemptions: recompute") == ["0", "0"]
    assert _row(printed, "swapped out (MiB)") == ["3", "1"]
    assert _row(printed, "requests completed") == ["10", "9"]
    assert "completed different numbers of requests (real 10, sim 9)" in " ".join(printed.split())
    assert "output tokens/s" in printed


def test_the_open_loop_table_compares_p95_and_p99_9_when_both_summaries_have_them(tmp_path, capsys) -> None:
    from validation.cli import _print

    def with_tail(s: dict, scale: float) -> dict:
        q = {"mean": 1.0, "p50": 1.0, "p90": 2.0, "p95": 2.5 * scale, "p99": 3.0, "p999": 4.0 * scale}
        return {**s, "ttft_s": q, "tpot_s": q, "e2e_s": q}

    ol = summary_errors(with_tail(_summary(), 1.0), with_tail(_summary(), 1.1))
    assert list(ol["ttft_s"]) == ["p50", "p90", "p95", "p99", "p999"]
    assert ol["e2e_s"]["p95"]["rel_error"] == pytest.approx(0.1) and ol["tpot_s"]["p999"]["rel_error"] == pytest.approx(0.1)
    _print({"open_loop": ol, "wall_s": 1.0}, tmp_path)
    header = next(line for line in capsys.readouterr().out.splitlines() if "metric" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")] == ["metric", "p50", "p90", "p95", "p99", "p99.9"]
    older = summary_errors(_summary(), with_tail(_summary(), 1.0))  # a summary from before p95: left out
    assert list(older["ttft_s"]) == ["p50", "p90", "p99"]


CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 512}


def test_sim_validate_of_a_swapping_run_prints_its_swaps(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    from sim.cli.main import main

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    scenario = {"name": "tiny-swap", "seed": 1, "model": "config.json", "gpu": "cpu-epyc-2core",
                "engine": {"max_model_len": 160, "num_gpu_blocks_override": 10},
                "kv": {"allocator": "paged", "block_size": 16},
                "scheduler": {"policy": "continuous", "max_num_seqs": 6, "preemption": "swap"},
                "workload": {"num_requests": 8, "arrival": {"type": "poisson", "rate": 200.0},
                             "prompt_tokens": {"type": "uniform", "low": 20, "high": 40},
                             "output_tokens": {"type": "uniform", "low": 40, "high": 90}}}
    (tmp_path / "v.yaml").write_text(json.dumps(scenario))
    out = tmp_path / "out"
    assert main(["validate", str(tmp_path / "v.yaml"), "--device", "cpu", "--out", str(out), "--mode", "open-loop",
                 "--no-warmup", "--no-drift-check"]) == 0
    printed = capsys.readouterr().out
    ol = json.loads((out / "validation.json").read_text())["open_loop"]
    swaps = ol["preemptions_swap"]
    assert swaps["real"] > 0 and swaps["sim"] > 0  # the pool is built to swap
    assert _row(printed, "preemptions: swap") == [str(swaps["real"]), str(swaps["sim"])]
    assert _row(printed, "preemptions: recompute") == [str(ol["preemptions_recompute"]["real"]),
                                                      str(ol["preemptions_recompute"]["sim"])]
    assert not re.search(r"preemptions real \d+ / sim \d+", printed)  # the old line, recompute only
    html = (out / "validation.html").read_text()
    assert f"swap preemptions {swaps['real']} / {swaps['sim']}" in html

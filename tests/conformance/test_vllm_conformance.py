"""kvsim's ``vllm-v1`` profile against vLLM 0.33.0's own scheduler, step by step (#38).

Each workload (tests/conformance/workloads.py: random sizes, memory pressure or none, shared
prefixes, ``max_num_seqs`` binding, long prompts over several chunks, budgets 256-8,192,
block sizes 16 and 32, arrivals spread over steps, async scheduling on and off, the
watermark, ``long_prefill_token_threshold``) runs on vLLM's ``Scheduler``/``AsyncScheduler``
(tests/conformance/vllm_side.py) and on kvsim's engine step (tests/conformance/kvsim_side.py),
and every step's record is compared: requests and tokens scheduled, preemptions, finished
requests, prefix-cache hit tokens of every admission, free blocks, queue lengths.

Needs the ``conformance`` extra (vLLM 0.33.0, in a virtual environment of its own: it pins
its own torch): ``pip install -e '.[conformance]'``. Without it, this module is skipped with
that reason; CI installs it (.ci/run).
"""

from __future__ import annotations

import os

import pytest

vllm = pytest.importorskip(
    "vllm", reason="vLLM is not installed: pip install -e '.[conformance]' in a venv of its own (docs/CONFORMANCE.md)")

from tests.conformance.compare import compare  # noqa: E402
from tests.conformance.kvsim_side import run_kvsim  # noqa: E402
from tests.conformance.vllm_side import run_vllm  # noqa: E402
from tests.conformance.workloads import random_workload  # noqa: E402

MIRRORED = "0.33.0"
NUM_WORKLOADS = int(os.environ.get("KVSIM_CONFORMANCE_WORKLOADS", "200"))


def test_the_installed_vllm_is_the_one_the_profile_mirrors():
    from sim.cost.profile import PROFILES

    assert vllm.__version__ == MIRRORED
    assert PROFILES["vllm-v1"].rules.mirrors == f"vLLM {MIRRORED}"


@pytest.mark.parametrize("chunk", range(10))
def test_every_step_is_vllms(chunk):
    """Every step of every workload identical in every field (the issue's target is >= 99.5%
    of steps; kvsim meets all of them): workloads ``chunk``, ``chunk + 10``, ..."""
    failures = []
    for seed in range(chunk, NUM_WORKLOADS, 10):
        w = random_workload(seed)
        ours, theirs = run_kvsim(w), run_vllm(w)
        c = compare(theirs, ours)
        if c.first_difference is not None:
            failures.append(f"seed {seed} {w.settings} {w.notes}: {c.token_share:.4f} of steps "
                            f"identical in tokens, preemptions vLLM/kvsim {c.preemptions}\n"
                            + c.describe(theirs, ours))
    assert not failures, "\n\n".join(failures)


def test_the_comparison_sees_a_difference():
    """The check can fail: kvsim's generic rules (decodes first, admission by the first chunk,
    no null block, no async lag) are told apart from vLLM's on a pressured workload."""
    w = next(random_workload(s) for s in range(100) if random_workload(s).notes["pressure"] == "high")
    c = compare(run_vllm(w), run_kvsim(w, profile="sglang"))
    assert c.first_difference is not None

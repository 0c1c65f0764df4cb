"""Inter-token latency (sim/engine/logs/itl.py): hand-computed runs where ITL's tail is far above
TPOT's (a chunked prefill stalling a decode, a recompute preemption), the log-binned
histogram's error bound against exact percentiles, and the gaps' conservation on random runs
(they add up to each request's last minus first token) with macro-steps on and off."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.scenario import parse_scenario
from sim.engine.logs.itl import FLUSH, REL_ERROR, ItlLog, merged
from sim.engine.logs.metrics import PERCENTILES, summarize
from sim.engine.logs.request_stats import RunRequests
from sim.engine.simulation import Simulation

BOUND = REL_ERROR * (1 + 1e-9)  # (a gap on a bin's edge may land in the next bin: log's last bit)


class TenMsPlusPrefill:
    """A cost model for hand computation: 10 ms a step plus 1 ms per prefill token."""

    decode_time_fn = None  # (macro-steps then price every step with step_time_s)

    def __init__(self, real) -> None:
        self.real = real

    def step_time_s(self, shape, idle_before_s=0.0) -> float:
        return 0.010 + 0.001 * shape.num_prefill_tokens

    def __getattr__(self, name):
        return getattr(self.real, name)


class KeepingLog(ItlLog):
    """An ItlLog that also keeps every (gap, count) pair it bins: the exact figures."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        super().__init__()
        self.kept = []

    def flush(self, everything: bool = False) -> None:
        whole = len(self.gaps) if everything else len(self.gaps) // FLUSH * FLUSH
        self.kept += zip(self.gaps[:whole], self.counts[:whole])
        super().flush(everything)

    def exact(self) -> np.ndarray:
        self.flush(True)
        return np.repeat([g for g, _ in self.kept], [c for _, c in self.kept])


def _sim(tmp_path, scenario_dict, trace: str, macro: bool = True, fake_cost: bool = True, **sections):
    path = tmp_path / "t.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + trace)
    data = scenario_dict(workload={"trace": {"path": str(path)}}, **sections)
    sim = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")), macro_steps=macro)
    if fake_cost:
        sim.cost = sim.core.runner.cost = TenMsPlusPrefill(sim.cost)
    log = KeepingLog()
    sim.itl = log
    if sim.frontend is not None:
        sim.frontend.itl = log
    else:
        sim.core.itl = log
    result = sim.run()
    return result, summarize(result), log


def _percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


@pytest.mark.parametrize("macro", [True, False])
def test_a_chunked_prefill_stalls_a_decode_by_hand(tmp_path, scenario_dict, macro) -> None:
    # A (16-token prompt, 5 tokens) runs alone: step 1 prefills it, 26 ms (token 1 at 26 ms).
    # B (64 tokens, 3 out) arrives at 20 ms; a budget of 32 tokens a step leaves it 31 beside A's
    # decode: steps of 41, 41 and 12 ms (chunks 31, 31, 2): A's tokens 2-4 at 67, 108, 120 ms,
    # B's first at 120. Then 10 ms decodes: A's 5th at 130 (done), B's 2nd and 3rd at 130, 140.
    result, summary, log = _sim(tmp_path, scenario_dict, "0.0,16,5\n0.02,64,3\n", macro,
                                scheduler={"policy": "chunked-prefill", "max_num_batched_tokens": 32})
    gaps = [0.041, 0.041, 0.012, 0.010] + [0.010, 0.010]  # A's four, B's two
    assert sorted(log.exact().tolist()) == pytest.approx(sorted(gaps))
    itl, tpot = summary["itl_s"], summary["tpot_s"]
    assert itl["mean"] == pytest.approx(sum(gaps) / 6)  # 124 ms / 6
    for key, q in PERCENTILES.items():
        assert itl[key] == pytest.approx(_percentile(gaps, q), rel=BOUND), key
    assert itl["p99"] == pytest.approx(0.041, rel=BOUND)  # 0.041 + 0.95 x 0
    # TPOT: A (130 - 26) / 4 = 26 ms, B (140 - 120) / 2 = 10 ms: its p99 is 10 + 0.99 x 16 ms
    assert tpot["p99"] == pytest.approx(0.02584)
    assert itl["p99"] > tpot["p99"] + 0.015  # the stall is in ITL's tail, TPOT averages it away


@pytest.mark.parametrize("macro", [True, False])
def test_a_recompute_preemption_is_one_long_gap_by_hand(tmp_path, scenario_dict, macro) -> None:
    # A pool of 3 blocks of 16 slots. A (16 + 20 tokens) prefills alone (26 ms); B (8 + 20) arrives
    # at 1 ms and prefills beside A's decode (18 ms, to 44 ms); eight 10 ms steps of both (A's
    # tokens 3-10, B's 2-9, to 124 ms). B's 17th token needs a 4th block: B is preempted
    # (recompute) and A decodes alone, ten 10 ms steps (done at 224 ms). B re-prefills its 17
    # tokens (27 ms, its 10th token at 251 ms: a gap of 127 ms), then ten 10 ms steps.
    result, summary, log = _sim(tmp_path, scenario_dict, "0.0,16,20\n0.001,8,20\n", macro,
                                engine={"num_gpu_blocks_override": 3, "max_model_len": 48},
                                scheduler={"watermark": 0.0})
    assert summary["preemptions"]["recompute"] == 1
    gaps = [0.018] + [0.010] * 18 + [0.010] * 8 + [0.127] + [0.010] * 10  # A's 19, B's 19
    assert sorted(log.exact().tolist()) == pytest.approx(sorted(gaps))
    itl, tpot = summary["itl_s"], summary["tpot_s"]
    assert itl["mean"] == pytest.approx(0.505 / 38)
    # 36 gaps of 10 ms, one of 18 and one of 127: p99 at rank 36.63, 18 + 0.63 x 109 ms
    assert itl["p99"] == pytest.approx(0.018 + 0.63 * 0.109, rel=BOUND)
    for key, q in PERCENTILES.items():
        assert itl[key] == pytest.approx(_percentile(gaps, q), rel=BOUND), key
    # TPOT: A 198 ms / 19, B 307 ms / 19: p99 = 10.42 + 0.99 x 5.74 ms, about 16.1 ms
    assert tpot["p99"] == pytest.approx((0.198 + 0.99 * 0.109) / 19)
    assert itl["p99"] > 5 * tpot["p99"]


_gaps = st.lists(st.tuples(st.floats(1e-6, 100.0), st.integers(1, 50)), min_size=1, max_size=300)


@settings(max_examples=60, deadline=None)
@given(_gaps, st.integers(1, 5))
def test_the_histogram_is_within_its_bound_of_exact_percentiles(pairs, flushes) -> None:
    log = KeepingLog()
    chunk = -(-len(pairs) // flushes)
    for i in range(0, len(pairs), chunk):  # pairs go in over several flushes
        log.gaps += [g for g, _ in pairs[i:i + chunk]]
        log.counts += [c for _, c in pairs[i:i + chunk]]
        log.flush(True)
    exact = log.exact()
    s = log.stats(PERCENTILES)
    assert log.n == exact.size
    assert s["mean"] == pytest.approx(float(exact.mean()), rel=1e-12)
    for key, q in PERCENTILES.items():
        assert abs(s[key] - _percentile(exact, q)) <= BOUND * _percentile(exact, q), key
    halves = KeepingLog(), KeepingLog()  # merged logs count the same gaps
    for i, (g, c) in enumerate(pairs):
        halves[i % 2].gaps.append(g)
        halves[i % 2].counts.append(c)
    both = merged(halves)
    assert both.n == log.n and both.bins == log.bins and both.stats(PERCENTILES)["p99"] == s["p99"]


def test_an_empty_log_has_no_figures_and_a_zero_gap_is_zero() -> None:
    assert ItlLog().stats(PERCENTILES) == dict.fromkeys(("mean", *PERCENTILES))
    log = ItlLog()
    log.gaps, log.counts = [0.0, 0.5], [3, 1]
    s = log.stats(PERCENTILES)
    assert s["p50"] == 0.0 and s["mean"] == pytest.approx(0.125)
    assert s["p999"] == pytest.approx(0.5 - 0.001 * 3 * 0.5, rel=BOUND)  # rank 2.997 of [0, 0, 0, 0.5]


_runs = st.fixed_dictionaries({
    "policy": st.sampled_from(["continuous", "chunked-prefill", "static"]),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "profile": st.sampled_from(["eager", "vllm-v1", "sglang"]),
    "blocks": st.integers(6, 14),
    "rows": st.lists(st.tuples(st.floats(0, 0.5), st.integers(4, 40), st.integers(1, 30)), min_size=1, max_size=10),
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_runs)
def test_the_gaps_add_up_to_each_request_s_tokens_macro_steps_on_or_off(tmp_path, scenario_dict, run) -> None:
    """Conservation: every finished request's gaps (its n - 1 of them) add up to its last token's
    delivery less its first's; every request is accounted for; macro-steps change nothing."""
    trace = "".join(f"{a!r},{p},{o}\n" for a, p, o in sorted(run["rows"]))
    sections = dict(engine={"profile": run["profile"], "num_gpu_blocks_override": run["blocks"], "max_model_len": 80},
                    scheduler={"policy": run["policy"], "preemption": run["preemption"],
                               **({"max_num_batched_tokens": 48} if run["policy"] == "chunked-prefill" else {})})
    if run["profile"] == "vllm-v1" and run["preemption"] == "swap":
        sections["scheduler"]["preemption"] = "recompute"  # (V1 has no swap preemption)
    out = [_sim(tmp_path, scenario_dict, trace, macro, fake_cost=False, **sections) for macro in (True, False)]
    (result, summary, log), (_, summary0, log0) = out
    reqs = summary["requests"]
    assert reqs["arrived"] == reqs["completed"] + reqs["rejected"] + reqs["in_flight"] == len(run["rows"])
    rr = RunRequests(result.requests)
    c = rr.c
    client = ~np.isnan(c["client_last_s"])
    first = np.where(client, c["client_first_s"], c["first_token_s"])[rr.done]
    last = np.where(client, c["client_last_s"], c["last_token_s"])[rr.done]
    exact = log.exact()
    assert exact.size == int((c["num_output_tokens"][rr.done] - 1).sum())
    if run["policy"] == "static" and result.frontend is not None:
        # a static batch's answers go out at its end (client_last_s), after their last tokens
        assert exact.sum() <= float((last - first).sum()) + 1e-12
    else:
        assert exact.sum() == pytest.approx(float((last - first).sum()), rel=1e-9, abs=1e-12)
    assert (exact > 0).all()
    assert summary["itl_s"] == summary0["itl_s"] and log.kept == log0.kept
    if exact.size:
        for key, q in PERCENTILES.items():
            assert math.isclose(summary["itl_s"][key], _percentile(exact, q), rel_tol=BOUND), key
    else:
        assert summary["itl_s"]["p50"] is None

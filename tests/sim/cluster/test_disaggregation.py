"""Disaggregated prefill/decode (sim/engine/disagg/handoff.py): every request and every block
accounted for on both pools, TTFT stamped on the prefill side, the transfer's arithmetic,
the link's contention, and decode admission waiting for free blocks."""

from __future__ import annotations

import math

import pytest

from cluster_world import scenario
from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster
from sim.request import RequestStatus

LINK = {"bandwidth_gbps": 100.0, "latency_s": 0.001}


def _disagg(p=2, d=2, link=None, prefill=None, decode=None, **dis):
    return {"router": "least-outstanding", "disaggregation": {
        "prefill_replicas": p, "decode_replicas": d, "kv_transfer": {**LINK, **(link or {})},
        "prefill": prefill or {}, "decode": decode or {}, **dis}}


def _run(sc, macro=True):
    sim = ClusterSimulation(sc, macro_steps=macro)
    result = sim.run()
    return sim, result, summarize_cluster(result)


#: Multi-turn chat with shared prefixes and prefix caching, prompts past max_model_len
#: (rejected), a decode pool with TP 2 and too few blocks for its load (admissions wait).
BUSY = dict(
    engine={"max_model_len": 1024, "profile": "vllm-v1"},
    workload={"num_requests": 150, "arrival": {"type": "poisson", "rate": 20.0},
              "prompt_tokens": {"type": "lognormal", "median": 300, "sigma": 0.8, "max": 2000},
              "output_tokens": {"type": "lognormal", "median": 40, "sigma": 1.2, "max": 500},
              "shared_prefix": {"num_prefixes": 4, "prefix_tokens": 128},
              "conversation": {"turns": {"type": "uniform", "low": 1, "high": 3}, "think_time_s": 0.5}})


@pytest.fixture(scope="module")
def busy():
    sc = scenario(cluster=_disagg(decode={"engine": {"tensor_parallel_size": 2, "num_gpu_blocks_override": 120}}),
                  **BUSY)
    return sc, *_run(sc)


def _counts(s: dict) -> tuple:
    return s["arrived"], s["completed"], s["rejected"], s["in_flight"]


def test_every_request_is_accounted_for_over_the_cluster_and_per_pool(busy) -> None:
    _, sim, result, s = busy
    arrived, completed, rejected, in_flight = _counts(s["requests"])
    assert arrived == len(result.requests) > 150 and rejected > 0  # follow-up turns; prompts too long
    assert arrived == completed + rejected + in_flight and in_flight == 0
    pools = s["cluster"]["disaggregation"]["pools"]
    pre, dec = (_counts(pools[k]["requests"]) for k in ("prefill", "decode"))
    for a, c, r, f in (pre, dec):
        assert a == c + r + f
    assert pre[0] == arrived and pre[2] == rejected  # every request is prefilled first
    assert dec[0] == pre[1] and dec[1] == completed and dec[2] == 0  # handed over, then finished
    for rep in s["replicas"]:
        assert _counts(rep["requests"])[0] == sum(_counts(rep["requests"])[1:])
    assert [r["role"] for r in s["replicas"]] == ["prefill", "prefill", "decode", "decode"]
    assert all(r.status in (RequestStatus.FINISHED, RequestStatus.REJECTED) for r in result.requests)


def test_the_blocks_of_both_pools_return_to_free(busy) -> None:
    _, sim, _, s = busy
    for replica in sim.replicas:
        replica.allocator.check_invariants()
        assert replica.allocator.num_allocated_slots() == 0, replica.role
        assert not replica.scheduler.running and not replica.scheduler.waiting
    assert not sim.handoff._copies and not any(sim.handoff._pending.values())
    xfer = s["cluster"]["disaggregation"]["kv_transfer"]
    assert xfer["waited_for_decode_blocks"] > 0  # the small decode pool made admissions wait
    assert xfer["transfers"] == s["cluster"]["disaggregation"]["pools"]["decode"]["requests"]["arrived"]


def test_ttft_is_stamped_on_the_prefill_side_and_decoding_follows_the_transfer(busy) -> None:
    _, sim, result, _ = busy
    copies = {r.request_id: r for rep in sim.replicas if rep.role == "prefill" for r in rep.requests}
    decoded = {r.request_id: rep.index for rep in sim.replicas if rep.role == "decode" for r in rep.requests}
    assert decoded == sim.handoff.decode_of
    done = [r for r in result.requests if r.status is RequestStatus.FINISHED]
    for req in done:
        copy = copies[req.request_id]
        assert copy.status is RequestStatus.FINISHED and copy.num_generated == 1
        assert req.first_token_s == copy.first_token_s  # TTFT from the prefill replica
        assert copy.finish_s >= copy.first_token_s  # the copy held its blocks until the KV landed
        assert req.last_token_s >= copy.finish_s or req.num_output_tokens == 1
        assert req.num_generated == req.num_output_tokens


def test_a_decode_pool_with_its_own_tensor_parallelism_moves_and_holds_its_shards(busy) -> None:
    _, sim, _, s = busy
    pre, dec = sim.replicas[0], sim.replicas[2]
    assert dec.parts.sc.engine.tensor_parallel_size == 2 and pre.parts.sc.engine.tensor_parallel_size == 1
    sizing = sim.handoff.sizing
    assert sizing.bytes_per_block_decode == 2 * dec.plan.bytes_per_block
    assert sizing.bytes_per_block_gpu == max(pre.plan.bytes_per_block, dec.plan.bytes_per_block)
    xfer = s["cluster"]["disaggregation"]["kv_transfer"]
    assert xfer["bytes_moved"] == xfer["blocks_moved"] * sizing.bytes_per_block_decode
    rep = s["replicas"]
    assert rep[2]["kv_pool_tokens"] == 120 * 16 != rep[0]["kv_pool_tokens"]


def test_macro_steps_change_nothing_with_disaggregation(busy) -> None:
    sc, _, _, s = busy
    _, _, s0 = _run(sc, macro=False)
    for summary in (s, s0):
        summary.pop("sim_wall_s")
    assert s == s0


#: Found by random clusters: one prefill and one decode replica, a pool the landed requests
#: fill (max_num_seqs 1 on the prefill side). A decode pool's stretch of decodes ends at its
#: first finishing step; the hand-offs waiting for its freed blocks must be served then, as
#: after a step taken alone. They were not: the last request waited for ever.
WAITING_HANDOFFS = {
    "seed": 0, "model": "tiny-llama", "gpu": "a100-80gb",
    "engine": {"max_model_len": 128, "num_gpu_blocks_override": 128, "profile": "eager"},
    "kv": {"allocator": "paged", "block_size": 1, "prefix_caching": False, "swap_space_gb": 0.0},
    "scheduler": {"policy": "continuous", "preemption": "recompute", "max_num_seqs": 1},
    "workload": {"num_requests": 5, "arrival": {"type": "poisson", "rate": 50.0},
                 "prompt_tokens": {"type": "uniform", "low": 1, "high": 26},
                 "output_tokens": {"type": "uniform", "low": 1, "high": 28}},
    "cluster": {"num_replicas": 2, "router": "round-robin", "disaggregation": {
        "prefill_replicas": 1, "decode_replicas": 1,
        "kv_transfer": {"bandwidth_gbps": 100, "latency_s": 0.0005, "granularity": "block"}}},
}


def test_a_decode_pools_stretch_serves_waiting_handoffs_when_it_frees_blocks() -> None:
    from sim.config.scenario import parse_scenario
    from sim.outputs.files import requests_csv

    sc = parse_scenario(WAITING_HANDOFFS, "/tmp/kvsim-disagg/waiting.yaml")
    fast, slow = _run(sc, macro=True), _run(sc, macro=False)
    assert fast[2]["requests"]["completed"] == fast[2]["requests"]["arrived"] == 5
    assert requests_csv(fast[1].requests) == requests_csv(slow[1].requests)
    assert fast[2]["cluster"]["disaggregation"] == slow[2]["cluster"]["disaggregation"]


#: One request alone: the transfer's arithmetic can be checked exactly.
def _one(link: dict, n: int = 1, rate: float = 1.0, **cluster):
    return scenario(cluster=_disagg(link=link, **cluster), engine={"max_model_len": 4096},
                    workload={"num_requests": n, "arrival": {"type": "constant", "rate": rate},
                              "prompt_tokens": {"type": "fixed", "value": 1000},
                              "output_tokens": {"type": "fixed", "value": 20}})


def test_block_wise_transfer_takes_latency_plus_bytes_over_bandwidth() -> None:
    sim, result, s = _run(_one({"granularity": "block"}))
    blocks = math.ceil(1000 / 16)
    per_gpu = sim.replicas[0].plan.bytes_per_block
    st = sim.handoff.stats
    assert st.blocks == blocks and st.bytes == blocks * per_gpu
    assert st.link_s[0] == pytest.approx(0.001 + blocks * per_gpu * 8 / 100e9, rel=1e-9)
    assert st.handoff_s[0] == pytest.approx(st.link_s[0], rel=1e-9)  # starts at the first token
    (req,) = result.requests
    assert req.finish_s > req.first_token_s + st.link_s[0]


def test_layer_wise_transfer_exposes_only_the_last_layer_when_the_link_keeps_up() -> None:
    sim, _, _ = _run(_one({"granularity": "layer"}))
    st, sizing = sim.handoff.stats, sim.handoff.sizing
    per_layer = 63 * sizing.bytes_per_block_gpu * 8 / 100e9 / sizing.num_layers
    (step_s,) = sim.replicas[0].steps.array()["duration_s"]  # the prompt's one step
    assert per_layer < step_s / sizing.num_layers  # the link keeps up with the layers
    assert st.handoff_s[0] == pytest.approx(0.001 + per_layer, rel=1e-9)
    slow, _, _ = _run(_one({"granularity": "layer", "bandwidth_gbps": 1.0}))  # it does not: link-bound
    whole = 63 * sizing.bytes_per_block_gpu * 8 / 1e9
    assert slow.handoff.stats.handoff_s[0] == pytest.approx(0.001 + whole - step_s * (1 - 1 / 32), rel=1e-6)


def test_transfers_serialize_on_each_replica_nic() -> None:
    """A slow link and a burst: without the NIC resources the transfers would overlap."""
    sim, result, s = _run(_one({"bandwidth_gbps": 2.0}, n=12, rate=50.0, p=2, d=3))
    spans = sim.handoff.stats.spans
    assert len(spans) == 12
    for nic in range(5):
        mine = sorted((a, b) for p, d, a, b in spans if nic in (p, d))
        assert all(b0 <= a1 for (_, b0), (a1, _) in zip(mine, mine[1:])), nic
    st = sim.handoff.stats
    assert st.alloc_waits == 0  # blocks were plentiful: any wait was for a NIC
    assert max(st.handoff_s) > 2 * max(st.link_s)  # later transfers queued behind earlier ones
    share = s["cluster"]["disaggregation"]["kv_transfer"]["link_busy_share"]
    assert 0 < share["prefill_nics"]["max"] <= 1 and 0 < share["decode_nics"]["max"] <= 1


def test_one_token_answers_and_prompts_no_decode_replica_could_hold() -> None:
    """The decode pool is smaller (600-token max_model_len, 40 blocks of 16): prompts from
    600 tokens are too long there, those whose prompt + max_tokens (100) outgrow 40 blocks
    exceed its pool; both are refused on arrival, on the prefill side."""
    sc = scenario(cluster=_disagg(decode={"engine": {"num_gpu_blocks_override": 40, "max_model_len": 600}}),
                  engine={"max_model_len": 2048},
                  workload={"num_requests": 60, "arrival": {"type": "poisson", "rate": 20.0}, "max_tokens": 100,
                            "prompt_tokens": {"type": "uniform", "low": 100, "high": 1200},
                            "output_tokens": {"type": "fixed", "value": 1}})
    sim, result, s = _run(sc)
    reasons = s["requests"]["rejected_by_reason"]
    assert set(reasons) == {"exceeds_decode_kv_pool", "prompt_too_long"}
    for r in result.requests:
        if r.status is RequestStatus.FINISHED:
            assert r.num_prompt_tokens + 100 <= 640
            assert r.num_generated == 1 and r.last_token_s == r.first_token_s
        else:
            assert r.reject_reason == ("prompt_too_long" if r.num_prompt_tokens >= 600 else "exceeds_decode_kv_pool")
    assert s["requests"]["completed"] + s["requests"]["rejected"] == 60 and s["requests"]["completed"] > 0
    assert s["cluster"]["disaggregation"]["pools"]["prefill"]["requests"]["rejected"] == s["requests"]["rejected"]
    assert all(rep.allocator.num_allocated_slots() == 0 for rep in sim.replicas)


def test_requests_csv_names_the_prefill_and_the_decode_replica(busy, tmp_path) -> None:
    import csv

    from sim.outputs.files import write_run

    _, sim, result, s = busy
    write_run(tmp_path, s, result, None, steps="none")
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert list(rows[0])[:4] == ["request_id", "replica", "decode_replica", "session_id"]
    assert len(rows) == s["requests"]["arrived"]
    prefill = {str(r.index) for r in sim.replicas if r.role == "prefill"}
    decode = {str(r.index) for r in sim.replicas if r.role == "decode"}
    for row in rows:
        assert row["replica"] in prefill  # the router placed it on the prefill pool
        if row["status"] == "rejected":  # turned away before any hand-off
            assert row["decode_replica"] == ""
        else:
            assert row["status"] == "finished" and row["decode_replica"] in decode
            assert int(row["decode_replica"]) == sim.handoff.decode_of[int(row["request_id"])]
    for entry in s["replicas"]:
        if entry["role"] == "decode":
            mine = [r for r in rows if r["decode_replica"] == str(entry["replica"])]
            assert len(mine) == entry["requests"]["arrived"] == entry["requests"]["completed"] > 0


@pytest.mark.parametrize("macro", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_prefill_pool_blocked_by_copies_awaiting_transfer_drains(macro, seed) -> None:
    """A prefill replica whose waiting prompts do not fit (its blocks held by copies whose KV has
    not yet crossed) sleeps; the hand-off that frees those blocks wakes it. Before, the run
    ended with most requests waiting and no event left (arrived 60, completed 4)."""
    sc = scenario(seed=seed, cluster=_disagg(p=1, d=1), engine={"max_model_len": 4096, "num_gpu_blocks_override": 300},
                  workload={"num_requests": 60, "arrival": {"type": "poisson", "rate": 10.0},
                            "prompt_tokens": {"type": "lognormal", "median": 2000, "sigma": 0.5, "max": 3000},
                            "output_tokens": {"type": "lognormal", "median": 100, "sigma": 0.6, "max": 500}})
    sim, result, s = _run(sc, macro)
    assert s["requests"]["completed"] == s["requests"]["arrived"] == 60
    assert s["requests"]["in_flight"] == 0 and not any(n.startswith("stranded") for n in s["notes"])
    for r in sim.replicas:
        assert not r.scheduler.waiting and not r.scheduler.running
        assert r.allocator.pool.num_free == r.plan.num_gpu_blocks - 1  # all blocks back (less vLLM's null block)


@pytest.mark.parametrize("macro", [True, False])
def test_a_one_token_answer_finished_at_the_hand_off_serves_the_waiting_hand_offs(macro) -> None:
    """A one-token answer finishes as its KV lands (no decode step runs for it); the blocks it
    frees must go to the hand-offs waiting for them, or an idle decode replica keeps them
    waiting for good. Found by tests/fuzz (arrived 32, completed 19, rejected 10, 3 stranded):
    two prefill replicas, one decode replica of 140 blocks, offline 1,500-token prompts."""
    sc = scenario(seed=2, engine={"profile": "vllm-v0", "max_model_len": 2048, "num_gpu_blocks_override": 140},
                  cluster={"num_replicas": 3, "router": "least-outstanding", "disaggregation": {
                      "prefill_replicas": 2, "decode_replicas": 1, "decode_router": "least-kv",
                      "kv_transfer": {"bandwidth_gbps": 100.0, "latency_s": 0.001, "granularity": "block"}}},
                  scheduler={"policy": "continuous", "preemption": "recompute"},
                  workload={"num_requests": 32, "arrival": {"type": "offline"},
                            "prompt_tokens": {"type": "lognormal", "median": 1500, "sigma": 0.6, "max": 3000},
                            "output_tokens": {"type": "lognormal", "median": 20, "sigma": 0.6, "max": 600},
                            "shared_prefix": {"num_prefixes": 3, "prefix_tokens": 128}})
    sim, result, s = _run(sc, macro)
    r = s["requests"]
    assert r["in_flight"] == 0 and r["completed"] + r["rejected"] == r["arrived"] == 32
    assert not any(n.startswith("stranded") for n in s["notes"])
    assert any(q.num_output_tokens == 1 and q.finish_s is not None for q in result.requests)  # the case itself
    assert not any(sim.handoff._pending.values())


def test_requests_left_when_the_events_run_out_are_reported_stranded() -> None:
    """The summary of a run that stopped with work left says so, with the requests' states, and
    does not call the run overloaded (its served rate is low because work stopped)."""
    import dataclasses

    from sim.engine.logs.metrics import summarize
    from sim.engine.simulation import Simulation
    from sim.request import Request

    sc = scenario(workload={"num_requests": 40, "arrival": {"type": "poisson", "rate": 50.0}})
    result = Simulation(sc).run()
    done = summarize(result)
    assert done["requests"]["in_flight"] == 0 and not any(n.startswith("stranded") for n in done["notes"])
    reqs = []
    for i in range(40):  # 35 finished, 3 waiting and 2 running as a deadlock leaves them
        r = Request(i, 0.02 * i, ((1, 100),), 10, 10)
        if i < 35:
            r.status, r.admitted_s, r.first_token_s, r.last_token_s, r.finish_s = (
                RequestStatus.FINISHED, r.arrival_s, r.arrival_s + 0.1, r.arrival_s + 0.5, r.arrival_s + 0.5)
            r.num_generated = r.num_output_tokens = 10
        else:
            r.status = RequestStatus.WAITING if i < 38 else RequestStatus.RUNNING
        reqs.append(r)
    s = summarize(dataclasses.replace(result, requests=reqs))
    assert s["requests"]["in_flight"] == 5 and s["requests"]["completed"] == 35
    stranded = [n for n in s["notes"] if n.startswith("stranded")]
    assert len(stranded) == 1 and "5 of 40 requests" in stranded[0] and "(3 waiting, 2 running)" in stranded[0]
    assert not any(n.startswith("overloaded") for n in s["notes"])

"""The front end's CPU (sim/engine/step/frontend.py) and vLLM V0's prefill-first steps, end to end."""

from __future__ import annotations

import pytest

from sim.config.scenario import parse_scenario
from sim.cost.profile import PROFILES
from sim.engine.step.frontend import FrontEnd
from sim.engine.logs.metrics import request_latencies, summarize
from sim.engine.simulation import Simulation


def test_the_front_end_is_one_cpu_serving_in_arrival_order() -> None:
    fe = FrontEnd(PROFILES["vllm-v1"].completions().with_overrides({"frontend_request_s": 1.0, "frontend_prompt_token_s": 0.0}))
    assert fe.receive(0.0, 10) == 1.0
    assert fe.receive(0.5, 10) == 2.0  # waits for the first job
    assert fe.receive(5.0, 10) == 6.0  # idle in between
    assert fe.busy_s == 3.0


def _run(scenario_dict, tmp_path, scheduler=None, **engine):
    data = scenario_dict(engine={"num_gpu_blocks_override": 60, **engine}, scheduler=scheduler or {},
                         workload={"num_requests": 30, "arrival": {"type": "poisson", "rate": 40.0},
                                   "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                                   "output_tokens": {"type": "uniform", "low": 2, "high": 40}})
    sim = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")))
    result = sim.run()
    return result, summarize(result)


def test_clients_see_the_tokens_after_the_front_end_streamed_them(scenario_dict, tmp_path) -> None:
    result, summary = _run(scenario_dict, tmp_path, profile="vllm-v1")
    r = summary["requests"]
    assert r["arrived"] == 30 == r["completed"] + r["rejected"] + r["in_flight"] and r["completed"] == 30
    assert summary["profile"]["latencies_seen_by"] == "client"
    assert summary["profile"]["graph_kernel_s"] == result.profile.graph_kernel_s > 0  # what the replays charged
    for req in result.requests:
        assert req.client_first_s >= req.first_token_s and req.client_last_s >= req.finish_s
        ttft, _, e2e = request_latencies(req)
        assert ttft == pytest.approx(req.client_first_s - req.arrival_s)
        assert e2e == pytest.approx(req.client_last_s - req.arrival_s)
        assert req.admitted_s >= req.arrival_s + PROFILES["vllm-v1"].frontend_request_s - 1e-12


def test_a_saturated_front_end_slows_the_client_not_the_engine(scenario_dict, tmp_path) -> None:
    fast, s_fast = _run(scenario_dict, tmp_path, profile="vllm-v1", profile_overrides={"frontend_token_s": 1e-6})
    slow, s_slow = _run(scenario_dict, tmp_path, profile="vllm-v1", profile_overrides={"frontend_token_s": 0.05})
    def engine_tpot_p50(res):
        tpots = sorted((r.last_token_s - r.first_token_s) / (r.num_output_tokens - 1)
                       for r in res.requests if r.num_output_tokens > 1)
        return tpots[len(tpots) // 2]

    # The front end runs on a CPU of its own: it charges no engine step (it only hands new
    # requests over later, behind its streaming work, which changes the batches a little);
    # the client's token times grow far beyond the engine's.
    per_token = lambda s: s["engine"]["busy_s"] / s["engine"]["num_steps"]  # noqa: E731
    assert per_token(s_slow) < 2 * per_token(s_fast)
    assert s_slow["tpot_s"]["p50"] > 5 * s_fast["tpot_s"]["p50"]
    assert s_slow["tpot_s"]["p50"] > 5 * engine_tpot_p50(slow)
    assert s_slow["e2e_s"]["p90"] > s_fast["e2e_s"]["p90"]


def test_inline_output_processing_slows_the_engine_itself(scenario_dict, tmp_path) -> None:
    base = {"step_host_s": 0.0, "seq_host_s": 0.0, "frontend_request_s": 0.0}
    _, a = _run(scenario_dict, tmp_path, profile="vllm-v0", profile_overrides={**base, "frontend_token_s": 0.0})
    _, b = _run(scenario_dict, tmp_path, profile="vllm-v0", profile_overrides={**base, "frontend_token_s": 0.01})
    assert a["profile"]["latencies_seen_by"] == b["profile"]["latencies_seen_by"] == "engine"
    assert b["engine"]["busy_s"] > a["engine"]["busy_s"] + 0.01 * 30  # at least one token each


def test_vllm_v0_runs_admitted_prompts_in_prefill_only_steps(scenario_dict, tmp_path) -> None:
    v0, _ = _run(scenario_dict, tmp_path, profile="vllm-v0", scheduler={"policy": "continuous"})
    v1ish, _ = _run(scenario_dict, tmp_path, profile="vllm-v0", scheduler={"policy": "continuous"},
                    profile_overrides={"prefill_first": False})
    steps, other = v0.steps.array(), v1ish.steps.array()
    mixed = lambda s: int(((s["num_prefill_tokens"] > 0) & (s["num_decode_tokens"] > 0)).sum())  # noqa: E731
    assert mixed(steps) == 0 < mixed(other)  # prefill-first never mixes a prompt with decodes
    assert int((steps["num_prefill_tokens"] > 0).sum()) > 0
    assert len(v0.scheduler.finished) == 30


@pytest.mark.parametrize("macro", [True, False])
def test_a_prompt_chunk_one_token_short_streams_no_token(tmp_path, macro) -> None:
    """A chunk that stops one token before its prompt's end samples nothing, though the
    request then looks like a decode (computed = prompt + generated - 1): the front end
    streams only what the scheduler's update sampled, so no client sees a first token
    before the engine made it."""
    data = {"seed": 0, "model": "tiny-llama", "gpu": "a100-80gb",
            "engine": {"max_model_len": 128, "num_gpu_blocks_override": 129, "profile": "vllm-v1"},  # 128 usable
            "kv": {"allocator": "paged", "block_size": 1},
            "scheduler": {"policy": "chunked-prefill", "max_num_seqs": 2, "max_num_batched_tokens": 15},
            "workload": {"num_requests": 14, "arrival": {"type": "poisson", "rate": 100.0},
                         "prompt_tokens": {"type": "uniform", "low": 1, "high": 35},
                         "output_tokens": {"type": "uniform", "low": 1, "high": 2}}}
    result = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")), macro_steps=macro).run()
    steps = result.steps.array()
    # the case arises: a 15-token prompt chunked to 14 beside one decode
    assert ((steps["num_prefill_tokens"] == 14) & (steps["num_decode_tokens"] == 1)).any()
    for req in result.requests:
        assert req.client_first_s >= req.first_token_s and req.client_last_s >= req.last_token_s


@pytest.mark.parametrize("macro", [True, False])
def test_a_front_end_backlog_is_part_of_the_run_and_its_throughput(scenario_dict, tmp_path, macro) -> None:
    """A saturated front end still streams after the engine's last step: the run ends when the
    last answer reached its client, and throughput counts that span (it used to count the
    engine's alone: 3x the rate the clients saw, with e2e latencies past the run's end)."""
    data = scenario_dict(engine={"num_gpu_blocks_override": 60, "profile": "vllm-v1",
                                 "profile_overrides": {"frontend_token_s": 0.02}},
                         workload={"num_requests": 30, "arrival": {"type": "offline"},
                                   "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                                   "output_tokens": {"type": "uniform", "low": 2, "high": 40}})
    result = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")), macro_steps=macro).run()
    s = summarize(result)
    last_step = float(result.steps.array()["time_s"].max())
    last_answer = max(r.client_last_s for r in result.requests)
    assert last_answer > 2 * last_step  # the front end is the bottleneck
    assert s["engine"]["simulated_s"] == pytest.approx(last_answer)
    assert s["e2e_s"]["p99"] <= s["engine"]["simulated_s"] + 1e-9
    tokens = sum(r.num_output_tokens for r in result.requests)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(tokens / last_answer)
    assert s["throughput"]["output_tokens_per_s"] <= 1 / 0.02 * (1 + 1e-9)  # the front end's own rate
    assert s["engine"]["frontend_busy_share"] > 0.9  # and the run says so
    assert sum("front end was busy" in n for n in s["notes"]) == 1


def test_an_offline_entrypoint_has_no_front_end(scenario_dict, tmp_path) -> None:
    """``engine.entrypoint: offline`` (LLM.generate, sgl.Engine, trtllm-bench): no HTTP server, so
    the clients see the engine's times; vLLM V0's inline output processing stays in its steps."""
    slow = {"frontend_token_s": 0.02}
    served, s_served = _run(scenario_dict, tmp_path, profile="vllm-v1", profile_overrides=slow)
    offline, s_offline = _run(scenario_dict, tmp_path, profile="vllm-v1", entrypoint="offline")
    assert s_served["profile"]["entrypoint"] == "api-server" and s_offline["profile"]["entrypoint"] == "offline"
    assert s_offline["profile"]["latencies_seen_by"] == "engine" and offline.profile.frontend_token_s == 0.0
    assert all(r.client_last_s is None for r in offline.requests)
    assert s_offline["engine"]["frontend_busy_share"] is None
    assert 0 < s_served["engine"]["frontend_busy_share"] <= 1
    assert s_offline["throughput"]["output_tokens_per_s"] > 2 * s_served["throughput"]["output_tokens_per_s"]
    base = {"step_host_s": 0.0, "seq_host_s": 0.0}
    _, v0_served = _run(scenario_dict, tmp_path, profile="vllm-v0", profile_overrides=base)
    _, v0_offline = _run(scenario_dict, tmp_path, profile="vllm-v0", entrypoint="offline", profile_overrides=base)
    _, v0_none = _run(scenario_dict, tmp_path, profile="vllm-v0", profile_overrides={**base, "frontend_token_s": 0.0})
    assert PROFILES["vllm-v0"].frontend_token_s > 0
    assert v0_offline["engine"]["busy_s"] == v0_served["engine"]["busy_s"] > v0_none["engine"]["busy_s"]
    assert v0_offline["profile"]["entrypoint"] == "offline"


def test_api_servers_share_the_requests_and_the_streams() -> None:
    """N front-end processes (vLLM's --api-server-count): a request goes to the CPU free first,
    a step's streaming work is spread evenly over them."""
    profile = PROFILES["vllm-v1"].completions().with_overrides({"frontend_request_s": 1.0, "frontend_token_s": 0.5})
    fe = FrontEnd(profile, servers=2)
    assert fe.receive(0.0, 10) == 1.0 and fe.receive(0.0, 10) == 1.0  # side by side
    assert fe.receive(0.5, 10) == 2.0  # both busy until 1.0
    assert fe.free_at == 2.0
    # 4 tokens of 0.5 s: 1 s on each CPU, after their own queues (1.0 and 2.0)
    assert fe._run(1.0, 4 * 0.5) == 3.0 and fe.free_at == 3.0
    assert fe.busy_s == pytest.approx(3.0 + 2.0)
    one = FrontEnd(profile)
    assert one.receive(0.0, 10) == 1.0 and one.receive(0.0, 10) == 2.0


@pytest.mark.parametrize("macro", [True, False])
def test_more_api_servers_lift_a_front_end_bound_run(scenario_dict, tmp_path, macro) -> None:
    def run(servers):
        data = scenario_dict(engine={"num_gpu_blocks_override": 60, "profile": "vllm-v1", "api_servers": servers,
                                     "profile_overrides": {"frontend_token_s": 0.02}},
                             workload={"num_requests": 30, "arrival": {"type": "offline"},
                                       "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                                       "output_tokens": {"type": "uniform", "low": 2, "high": 40}})
        result = Simulation(parse_scenario(data, str(tmp_path / "s.yaml")), macro_steps=macro).run()
        return result, summarize(result)

    one, s1 = run(1)
    four, s4 = run(4)
    assert s4["profile"]["api_servers"] == 4 and s1["profile"]["api_servers"] == 1
    assert s4["requests"]["completed"] == s1["requests"]["completed"] == 30
    assert s4["throughput"]["output_tokens_per_s"] > 3 * s1["throughput"]["output_tokens_per_s"]
    assert s4["tpot_s"]["p50"] < s1["tpot_s"]["p50"] / 3
    for req in four.requests:
        assert req.client_first_s >= req.first_token_s and req.client_last_s >= req.last_token_s


def test_api_servers_are_checked(scenario_dict, tmp_path) -> None:
    from sim.errors import ConfigError

    base = scenario_dict(workload={"num_requests": 3, "arrival": {"type": "offline"},
                                   "prompt_tokens": {"type": "fixed", "value": 8},
                                   "output_tokens": {"type": "fixed", "value": 4}})
    for engine, words in (({"api_servers": 0}, "greater than 0"), ({"api_servers": 2, "entrypoint": "offline"}, "offline"),
                          ({"api_servers": 1000}, "256"), ({"entrypoint": "batch"}, "api-server")):
        data = {**base, "engine": {**base.get("engine", {}), **engine}}
        with pytest.raises(ConfigError) as err:
            parse_scenario(data, str(tmp_path / "s.yaml"))
        key = "engine.api_servers" if "api_servers" in engine else "engine.entrypoint"
        assert err.value.key == key and words in err.value.message


def test_a_clusters_summary_names_its_busiest_front_end(scenario_dict, tmp_path) -> None:
    from sim.engine.cluster.simulation import ClusterSimulation, summarize_cluster

    data = scenario_dict(engine={"num_gpu_blocks_override": 60, "profile": "vllm-v1",
                                 "profile_overrides": {"frontend_token_s": 0.02}},
                         cluster={"num_replicas": 2, "router": "round-robin"},
                         workload={"num_requests": 30, "arrival": {"type": "offline"},
                                   "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                                   "output_tokens": {"type": "uniform", "low": 2, "high": 40}})
    result = ClusterSimulation(parse_scenario(data, str(tmp_path / "s.yaml"))).run()
    s = summarize_cluster(result)
    per = [summarize(r)["engine"]["frontend_busy_share"] for r in result.replicas]
    assert s["engine"]["frontend_busy_share"] == max(per) > 0.9
    assert sum("front end was busy" in n for n in s["notes"]) == 1
    assert s["engine"]["simulated_s"] == pytest.approx(max(r.client_last_s for r in result.requests))

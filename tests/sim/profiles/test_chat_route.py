"""The chat route's time per request (``engine.entrypoint: chat``, profile ``frontend_chat_request_s``)."""

from __future__ import annotations

import pytest

from sim.config.scenario import parse_scenario
from sim.cost.profile import PROFILES
from sim.cost.profile_setup import engine_profile
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation
from sim.engine.step.frontend import FrontEnd
from sim.errors import ConfigError


def test_the_chat_time_delays_a_request_without_holding_the_front_end() -> None:
    profile = PROFILES["vllm-v1"].with_overrides({"frontend_request_s": 1.0, "frontend_chat_request_s": 0.25})
    fe = FrontEnd(profile)
    assert fe.receive(0.0, 10) == 1.25
    assert fe.receive(0.5, 10) == 2.25  # queues behind the first job's 1 s of work, not its 0.25 s wait
    assert fe.busy_s == 2.0
    two = FrontEnd(profile, servers=2)
    assert two.receive(0.0, 10) == two.receive(0.0, 10) == 1.25


def _scenario(scenario_dict, tmp_path, entrypoint, profile="vllm-v1", **overrides):
    data = scenario_dict(engine={"num_gpu_blocks_override": 200, "entrypoint": entrypoint, "profile": profile,
                                 "profile_overrides": overrides},
                         workload={"num_requests": 12, "arrival": {"type": "poisson", "rate": 2.0},
                                   "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
                                   "output_tokens": {"type": "uniform", "low": 2, "high": 20}})
    return parse_scenario(data, str(tmp_path / "s.yaml"))


@pytest.mark.parametrize("profile", ["vllm-v1", "sglang", "trtllm-pytorch"])
def test_each_fitted_profile_charges_the_chat_route_only(profile, scenario_dict, tmp_path) -> None:
    assert PROFILES[profile].frontend_chat_request_s > 0
    for entrypoint, expected in (("chat", PROFILES[profile].frontend_chat_request_s), ("api-server", 0.0),
                                 ("offline", 0.0)):
        sc = _scenario(scenario_dict, tmp_path, entrypoint, profile)
        assert engine_profile(sc.engine, sc.gpu).frontend_chat_request_s == expected


def test_chat_clients_wait_the_chat_time_more_for_every_first_token(scenario_dict, tmp_path) -> None:
    runs = {}
    for entrypoint in ("api-server", "chat"):
        result = Simulation(_scenario(scenario_dict, tmp_path, entrypoint, frontend_chat_request_s=0.04)).run()
        runs[entrypoint] = (result, summarize(result))
    (plain, s_plain), (chat, s_chat) = runs["api-server"], runs["chat"]
    assert s_chat["requests"]["completed"] == s_plain["requests"]["completed"] == 12
    # requests 0.5 s apart on average against a few ms of work each: the engine is mostly idle, so
    # each request's first token comes the chat time later (the same engine steps, shifted)
    shifts = [c.client_first_s - p.client_first_s for c, p in zip(chat.requests, plain.requests)]
    assert sum(1 for s in shifts if s == pytest.approx(0.04, abs=2e-3)) >= 9
    assert s_chat["ttft_s"]["p50"] == pytest.approx(s_plain["ttft_s"]["p50"] + 0.04, abs=3e-3)
    for req in chat.requests:
        assert req.admitted_s >= req.arrival_s + 0.04 - 1e-12


def test_a_negative_chat_time_is_refused(scenario_dict, tmp_path) -> None:
    with pytest.raises(ConfigError, match="frontend_chat_request_s"):
        _scenario(scenario_dict, tmp_path, "chat", frontend_chat_request_s=-1.0)

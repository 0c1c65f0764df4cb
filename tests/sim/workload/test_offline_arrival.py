"""``workload.arrival: {type: offline}``: every request at t = 0, as an offline batch job or a
throughput benchmark submits them."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from sim.cli.main import main
from sim.config.scenario import parse_scenario
from sim.engine.logs.metrics import summarize
from sim.engine.simulation import Simulation
from sim.errors import ConfigError
from sim.workload.generate import arrival_times

WORKLOAD = {"num_requests": 24, "arrival": {"type": "offline"},
            "prompt_tokens": {"type": "fixed", "value": 32}, "output_tokens": {"type": "fixed", "value": 16}}


def _scenario(tmp_path, policy="static", **workload):
    return parse_scenario({"model": "tiny-llama", "gpu": "a100-80gb", "engine": {"max_model_len": 256},
                           "scheduler": {"policy": policy, "max_num_seqs": 8, "max_num_batched_tokens": 2048},
                           "workload": {**WORKLOAD, **workload}}, str(tmp_path / "s.yaml"))


def test_every_request_arrives_at_zero(tmp_path) -> None:
    times = arrival_times(_scenario(tmp_path), np.random.default_rng(0))
    assert times.size == 24 and (times == 0.0).all()


def test_static_batches_are_full_from_the_first(tmp_path) -> None:
    """With all requests waiting at t = 0, static batching runs 24 / 8 = 3 full batches of 16
    steps (a prefill, then 15 decodes); staggered arrivals would start a batch of one."""
    s = summarize(Simulation(_scenario(tmp_path)).run())
    assert s["requests"]["completed"] == 24 and s["engine"]["num_steps"] == 3 * 16
    assert s["engine"]["peak_running"] == 8
    staggered = _scenario(tmp_path, arrival={"type": "constant", "rate": 1e6})
    assert summarize(Simulation(staggered).run())["engine"]["num_steps"] > 3 * 16


def test_follow_up_turns_still_wait_for_their_answers(tmp_path) -> None:
    sc = _scenario(tmp_path, policy="continuous", num_requests=4,
                   conversation={"turns": {"type": "fixed", "value": 3}, "think_time_s": 1.0})
    requests = list(Simulation(sc).run().requests)
    first = [r for r in requests if r.arrival_s == 0.0]
    later = [r for r in requests if r.arrival_s > 0.0]
    assert len(first) == 4 and len(later) == 8  # the 4 first turns at t = 0, the rest after answers
    assert min(r.arrival_s for r in later) > min(r.finish_s for r in first)


def test_it_needs_num_requests(tmp_path, capsys) -> None:
    with pytest.raises(ConfigError, match="needs 'num_requests'"):
        _scenario(tmp_path, num_requests=None, duration_s=10.0)
    scen = tmp_path / "bad.yaml"
    scen.write_text(yaml.safe_dump({"model": "tiny-llama", "gpu": "a100-80gb", "workload": {
        **WORKLOAD, "arrival": {"type": "offline", "rate": 5.0}}}))
    assert main(["run", str(scen), "--out", str(tmp_path / "o"), "--quiet", "--no-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "workload.arrival" in err[0], err

"""A run's memory is estimated before it starts (sim/engine/footprint.py): refused past what the
machine has (exit 2, one line with the numbers), announced when it takes a good share."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim.engine.footprint as fp
from sim.cli.main import main
from sim.config.scenario import load_scenario
from sim.errors import ConfigError

SCENARIOS = Path(__file__).parents[3] / "scenarios"


def test_requests_from_the_count_the_rate_and_the_turns() -> None:
    chat = load_scenario(SCENARIOS / "chatbot.yaml", ["workload.num_requests=1000"])
    assert fp.expected_requests(chat) == 1000
    timed = load_scenario(SCENARIOS / "chatbot.yaml", ["workload.num_requests=1000", "workload.duration_s=10"])
    rate = timed.workload.arrival.rate
    assert fp.expected_requests(timed) == min(1000, int(rate * 10) + 1)
    turns = load_scenario(SCENARIOS / "chatbot.yaml", [
        "workload.num_requests=100", "workload.conversation={turns: {type: uniform, low: 1, high: 4}}"])
    assert fp.expected_requests(turns) == 400


def test_the_estimate_adds_requests_and_every_replica_s_blocks() -> None:
    sc = load_scenario(SCENARIOS / "chatbot.yaml", ["workload.num_requests=10000", "cluster.num_replicas=4"])
    need, how = fp.estimate_bytes(sc, 50_000)
    assert need == fp.BASE_BYTES + 10_000 * fp.QUEUED_REQUEST_BYTES + 4 * 50_000 * fp.BLOCK_BYTES
    assert how == "10,000 requests x 2.2 KB + 4 KV pools x 50,000 blocks x 150 B"


def test_refused_past_the_memory_available_warned_near_it_silent_below() -> None:
    sc = load_scenario(SCENARIOS / "chatbot.yaml", ["workload.num_requests=100000"])
    need, _ = fp.estimate_bytes(sc, 30_000)
    with pytest.raises(ConfigError) as e:
        fp.check_footprint(sc, 30_000, available=need - 1)
    assert e.value.key == "workload.num_requests" and "GiB available" in e.value.message
    assert fp.check_footprint(sc, 30_000, available=int(need * 1.5)).startswith("note: this run may take about")
    assert fp.check_footprint(sc, 30_000, available=need * 100) is None
    fleet = load_scenario(SCENARIOS / "chatbot.yaml", ["workload.num_requests=100", "cluster.num_replicas=64"])
    with pytest.raises(ConfigError) as e:
        fp.check_footprint(fleet, 10_000_000, available=1 << 30)
    assert e.value.key == "cluster.num_replicas"


def test_the_cli_refuses_in_one_line_before_writing(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(fp, "available_bytes", lambda: 200 << 20)
    out = tmp_path / "o"
    assert main(["run", str(SCENARIOS / "chatbot.yaml"), "--set", "workload.num_requests=50000", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "workload.num_requests: the run would need" in err[0]
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize("overrides", [[], ["cluster.num_replicas=2"]])
def test_sim_run_plans_the_memory_once(tmp_path: Path, monkeypatch, overrides) -> None:
    """The footprint check's memory plan is the one the run is built on: ``plan_memory`` runs
    once per ``sim run`` (one engine, or replicas), and the run still writes its files."""
    import sim.engine.parts as parts

    calls = []
    real = parts.plan_memory

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(parts, "plan_memory", counting)
    sets = [a for o in ["workload.num_requests=40", *overrides] for a in ("--set", o)]
    assert main(["run", str(SCENARIOS / "chatbot.yaml"), *sets, "--no-report", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0
    assert len(calls) == 1
    assert (tmp_path / "run" / "summary.json").exists()

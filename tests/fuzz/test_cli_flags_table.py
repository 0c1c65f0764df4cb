"""Every entry point and flag, given bad input: exit 2, exactly one stderr line that starts with
``error:`` and names the flag or key, no traceback, and nothing run.

The table covers the command lines themselves (argparse errors included); scenario, trace,
calibration and measurement contents have their own tables and fuzz tests beside this one.
"""

from __future__ import annotations

import pytest

import microbench.cli
import sim.cli.main
from sim.engine import simulation

SCENARIO = "scenarios/chatbot.yaml"
VALIDATE = "scenarios/validate-cpu.yaml"

# (argv, text the error line must contain)
SIM_CASES = [
    ([], "command"),
    (["bogus"], "invalid choice: 'bogus'"),
    (["run"], "scenario"),
    (["run", SCENARIO, "--bogus"], "--bogus"),
    (["run", SCENARIO, "--set"], "--set"),
    (["run", SCENARIO, "--set", "kv.block_size"], "kv.block_size"),
    (["run", SCENARIO, "--set", "kv.block_size=0"], "kv.block_size"),
    (["run", SCENARIO, "--set", "kv.nonsense=1"], "kv.nonsense"),
    (["run", SCENARIO, "--set", "engine.max_model_len=abc"], "engine.max_model_len"),
    (["run", "no/such/scenario.yaml"], "no/such/scenario.yaml"),
    (["run", SCENARIO, "--out", "README.md"], "--out"),
    (["kv"], "--model"),
    (["kv", "--model", "no-such-model"], "no-such-model"),
    (["kv", "--model", "llama-3-8b", "--kv-dtype", "fp64"], "--kv-dtype"),
    (["kv", "--model", "llama-3-8b", "--weight-dtype", "fp64"], "--weight-dtype"),
    (["kv", "--model", "llama-3-8b", "--block-size", "0"], "--block-size"),
    (["kv", "--model", "llama-3-8b", "--pp", "3"], "--pp"),  # pipeline parallelism (#15)
    (["kv", "--model", "tiny-llama", "--pp", "4"], "--pp"),
    (["kv", "--model", "llama-3-8b", "--pp", "x"], "--pp"),
    (["kv", "--model", "llama-3-8b", "--block-size", "abc"], "--block-size"),
    (["kv", "--model", "llama-3-8b", "--gpu", "no-such-gpu"], "no-such-gpu"),
    (["kv", "--model", "llama-3-8b", "--gpu", "a100-80gb", "--max-model-len", "-5"], "--max-model-len"),
    (["kv", "--model", "llama-3-8b", "--gpu", "a100-80gb", "--gpu-memory-utilization", "2"],
     "--gpu-memory-utilization"),
    (["sweep", SCENARIO], "--grid"),
    (["sweep", SCENARIO, "--grid", "kv.block_size"], "kv.block_size"),
    (["sweep", SCENARIO, "--grid", "kv.block_size=8,8"], "kv.block_size"),
    (["sweep", SCENARIO, "--grid", "kv.block_size=8,16", "--workers", "0"], "--workers"),
    (["sweep", SCENARIO, "--grid", "kv.block_size=8,16", "--executor", "slurm"], "--executor"),
    (["sweep", SCENARIO, "--grid", "kv.block_size=8,16", "--ray-address", "127.0.0.1:1"], "--ray-address"),
    (["sweep", SCENARIO, "--grid", "kv.block_size=8,16", "--out", "/proc/kvsim/sweep"], "cannot write in /proc"),
    (["plan", "scenarios/plan-chatbot.yaml", "--out", "/proc/kvsim/plan"], "cannot write in /proc"),
    (["plan", "scenarios/plan-chatbot.yaml", "--executor", "ray", "--ray-timeout", "nan"], "--ray-timeout"),
    (["plan", "scenarios/plan-chatbot.yaml", "--executor", "ray", "--ray-timeout", "inf"], "--ray-timeout"),
    (["plan", "scenarios/plan-chatbot.yaml", "--executor", "ray", "--ray-timeout", "1e300"], "at most 86,400"),
    (["run", SCENARIO, "--out", "/proc/kvsim"], "cannot write in /proc"),
    (["kv", "--model", "llama3-8b"], "did you mean 'llama-3-8b'"),
    (["kv", "--model", "llama-3-8b", "--gpu", "h100"], "did you mean 'h100-nvl' or 'h100-pcie' or 'h100-sxm'?"),
    (["run", SCENARIO, "--set", "scheduler.max_num_seq=4"], "did you mean 'max_num_seqs'?"),
    (["kv", "--model", "mistralai/Mistral-7B-Instruct-v0.3"], "did you mean 'mistral-7b'"),
    (["sweep", SCENARIO, "--grid", "kv.block_size=8,16", "--sort-by", "ttft_s.p98"], "--sort-by"),
    (["sweep", SCENARIO, "--grid", "kv.block_size=8,16", "--metric", "bogus"], "--sort-by"),
    (["compare"], "DIR"),
    (["compare", "no/such/run"], "no/such/run"),
    (["validate"], "scenario"),
    (["validate", VALIDATE, "--device", "tpu"], "--device"),
    (["validate", VALIDATE, "--device", "cuda:0"], "--device"),
    (["validate", VALIDATE, "--mode", "sideways"], "--mode"),
    (["validate", VALIDATE, "--set", "kv.allocator=contiguous-static"], "kv.allocator"),
    (["validate", VALIDATE, "--set", "model=deepseek-v2-lite", "--set", "gpu=a100-80gb"], "model"),
    (["validate", VALIDATE, "--calibration", "no-such-gpu"], "no-such-gpu"),
]

MICROBENCH_CASES = [
    ([], "command"),
    (["calibrate"], "--gpu"),
    (["calibrate", "--gpu", "0"], "--gpu"),
    (["calibrate", "--device", "cuda"], "--device"),
    (["calibrate", "--device", "tpu"], "--device"),
    (["calibrate", "--device", "cpu", "--threads", "0"], "--threads"),
    (["calibrate", "--device", "cpu", "--out", "/"], "--out"),
    (["fit", "no/such.jsonl", "-o", "x.yaml"], "no/such.jsonl"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "abc", "--n", "8", "--k", "8"], "--m"),
    (["predict", "a100-80gb", "--kernel", "gemm", "--m", "1", "--n", "8", "--k", "8", "--dtype", "fp64"], "--dtype"),
    (["predict", "a100-80gb", "--kernel", "flash", "--m", "1"], "flash"),
]


def _one_error_line(capsys, expected: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert expected in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def nothing_runs(monkeypatch):
    """A bad flag must be refused before any simulation starts."""
    def refuse(*args, **kwargs):
        raise AssertionError("a simulation started")
    monkeypatch.setattr(simulation.Simulation, "__init__", refuse)


@pytest.mark.parametrize("argv,expected", SIM_CASES, ids=[" ".join(a) or "<none>" for a, _ in SIM_CASES])
def test_sim_refuses_bad_flags_in_one_line(argv, expected, capsys, nothing_runs, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert sim.cli.main.main(argv) == 2
    _one_error_line(capsys, expected)


def test_validate_refuses_a_model_the_machine_cannot_hold(capsys, nothing_runs, monkeypatch):
    import validation.cli

    monkeypatch.setattr(validation.cli, "_available_bytes", lambda device: 1 << 20)
    assert sim.cli.main.main(["validate", VALIDATE]) == 2
    assert "GiB available" in _one_error_line(capsys, "model")


@pytest.mark.parametrize("argv,expected", MICROBENCH_CASES,
                         ids=[" ".join(a) or "<none>" for a, _ in MICROBENCH_CASES])
def test_microbench_refuses_bad_flags_in_one_line(argv, expected, capsys, monkeypatch):
    import microbench.calibrate

    def refuse(*args, **kwargs):
        raise AssertionError("timing started")
    monkeypatch.setattr(microbench.calibrate, "run_sweep", refuse)
    assert microbench.cli.main(argv) == 2
    _one_error_line(capsys, expected)


@pytest.mark.parametrize("hub_id,preset", [("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
                                           ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
                                           ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
                                           ("google/gemma-2-9b-it", "gemma-2-9b")])
def test_hugging_face_ids_of_a_preset_and_its_fine_tunes_name_the_preset(hub_id, preset, capsys) -> None:
    import json

    assert sim.cli.main.main(["kv", "--model", hub_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == preset


def test_kv_takes_vllms_parallelism_flags(capsys) -> None:
    import json

    argv = ["kv", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--json"]
    assert sim.cli.main.main(argv + ["--tp", "4", "--pp", "2"]) == 0
    short = json.loads(capsys.readouterr().out)
    assert sim.cli.main.main(argv + ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]) == 0
    assert json.loads(capsys.readouterr().out) == short
    assert sim.cli.main.main(argv + ["-tp", "2"]) == 0
    assert json.loads(capsys.readouterr().out) != short


def test_an_out_link_says_where_it_writes_and_a_dangling_one_is_refused(tmp_path, capsys) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    argv = ["run", SCENARIO, "--set", "workload.num_requests=10", "--no-report"]
    assert sim.cli.main.main(argv + ["--out", str(tmp_path / "link")]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'elsewhere'}/ (summary.json" in out and f"through the link {tmp_path / 'link'}" in out
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert sim.cli.main.main(argv + ["--out", str(tmp_path / "dangling")]) == 2
    assert "is a symlink to" in _one_error_line(capsys, "--out") and not (tmp_path / "nowhere").exists()


def test_microbench_fit_replaces_a_link_at_its_output_instead_of_writing_through_it(tmp_path, capsys) -> None:
    target = tmp_path / "theirs.yaml"
    target.write_text("someone else's file\n")
    (tmp_path / "cal.yaml").symlink_to(target)
    assert microbench.cli.main(["fit", "calibrations/cpu-epyc-2core.jsonl", "-o", str(tmp_path / "cal.yaml")]) == 0
    assert target.read_text() == "someone else's file\n"
    assert not (tmp_path / "cal.yaml").is_symlink() and "schema: 2" in (tmp_path / "cal.yaml").read_text()


def test_a_sweep_or_plan_subfolder_linked_elsewhere_is_refused_on_resume(tmp_path, capsys) -> None:
    """points/ (sim sweep) and configs/ (sim plan) are the run's own: a symlink there would send
    its writes and removals outside --out."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "points").symlink_to(elsewhere)
    argv = ["sweep", "chatbot", "--grid", "scheduler.max_num_seqs=8,16", "--set", "workload.num_requests=10",
            "--out", str(tmp_path / "sw"), "--resume"]
    assert sim.cli.main.main(argv) == 2
    assert "points: --out: is a symlink to" in _one_error_line(capsys, "--out")
    (tmp_path / "pl").mkdir()
    (tmp_path / "pl" / "configs").symlink_to(elsewhere)
    assert sim.cli.main.main(["plan", "plan-chatbot", "--out", str(tmp_path / "pl"), "--resume"]) == 2
    assert "configs: --out: is a symlink to" in _one_error_line(capsys, "--out")
    assert list(elsewhere.iterdir()) == []


def test_sweep_and_plan_take_a_shipped_scenario_by_name(tmp_path, monkeypatch, capsys) -> None:
    from sim.config.shipped import resolve_scenario_path

    monkeypatch.chdir(tmp_path)
    assert resolve_scenario_path("plan-chatbot").name == "plan-chatbot.yaml"
    assert sim.cli.main.main(["sweep", "chatbot", "--grid", "scheduler.max_num_seqs=8,16", "--set",
                              "workload.num_requests=10", "--out", "sw"]) == 0
    assert (tmp_path / "sw" / "results.csv").is_file()

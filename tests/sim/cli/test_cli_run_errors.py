"""Bad input to `sim run`: exit status 2 and one line `error: <file>: <key.path>: ...`."""

from __future__ import annotations

import pytest
import yaml

from sim.cli.main import main

GOOD = {
    "name": "bad-input",
    "model": "tiny-llama",
    "gpu": "a100-80gb",
    "engine": {"max_model_len": 256, "num_gpu_blocks_override": 64},
    "kv": {"allocator": "paged", "block_size": 16},
    "workload": {"num_requests": 2, "arrival": {"type": "constant", "rate": 10.0},
                 "prompt_tokens": {"type": "fixed", "value": 20},
                 "output_tokens": {"type": "fixed", "value": 5}},
}


def write(tmp_path, data, name="scenario.yaml"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def with_(section, **values):
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in GOOD.items()}
    if section is None:
        data.update(values)
    else:
        data[section] = {**data[section], **values}
    return data


def one_error_line(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]


def run_file(capsys, tmp_path, path, *sets):
    argv = ["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-report"]
    for s in sets:
        argv += ["--set", s]
    return one_error_line(capsys, argv)


def test_good_scenario_runs(tmp_path, capsys) -> None:
    """The baseline every case below breaks in exactly one place."""
    path = write(tmp_path, GOOD)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-report"]) == 0
    assert (tmp_path / "out" / "summary.json").is_file()


@pytest.mark.parametrize("data, key, words", [
    (with_("kv", blok_size=16), "kv.blok_size", "unknown key"),
    (with_(None, colour="red"), "colour", "unknown key"),
    (with_("kv", block_size="16"), "kv.block_size", "integer"),
    (with_("kv", block_size=0), "kv.block_size", "greater than 0"),
    (with_("engine", gpu_memory_utilization=1.5), "engine.gpu_memory_utilization", "1.5"),
    (with_("kv", allocator="buddy"), "kv.allocator", "buddy"),
    (with_("kv", allocator="contiguous-static", prefix_caching=True), "kv", "paged"),
    (with_("workload", prompt_tokens={"type": "fixed", "value": 300}), "workload.prompt_tokens.value", "max_model_len"),
    (with_("workload", prompt_tokens={"type": "normal", "mean": 3}), "workload.prompt_tokens.type", "normal"),
    (with_(None, model="gpt-17"), "model", "gpt-17"),
    (with_(None, gpu="tpu-v9"), "gpu", "tpu-v9"),
    (with_("workload", trace={"path": "nope.csv"}, arrival=None, prompt_tokens=None, output_tokens=None),
     "workload.trace.path", "nope.csv"),
])
def test_bad_value_names_file_and_key(tmp_path, capsys, data, key, words) -> None:
    if data.get("workload", {}).get("trace"):
        data["workload"] = {k: v for k, v in data["workload"].items() if v is not None}
    path = write(tmp_path, data)
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: {key}: "), line
    assert words in line


def test_trace_combined_with_arrival(tmp_path, capsys) -> None:
    trace = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n", "t.csv")
    path = write(tmp_path, with_("workload", trace={"path": str(trace)}))
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: workload: ") and "trace" in line


def test_missing_scenario_file(tmp_path, capsys) -> None:
    path = tmp_path / "nowhere.yaml"
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: ") and "not found" in line


def test_malformed_yaml(tmp_path, capsys) -> None:
    path = write(tmp_path, "name: x\nkv: [1, 2\n")
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: line ") and "malformed YAML" in line


def test_yaml_that_is_not_a_mapping(tmp_path, capsys) -> None:
    path = write(tmp_path, "- 1\n- 2\n")
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: <top>: ")


def test_empty_file_lacks_workload(tmp_path, capsys) -> None:
    path = write(tmp_path, "")
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: workload: ") and "missing" in line


def test_missing_empirical_file(tmp_path, capsys) -> None:
    path = write(tmp_path, with_("workload", prompt_tokens={"type": "empirical", "path": "x.csv", "column": "n"}))
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: workload.prompt_tokens.path: ") and "x.csv" in line


def test_max_model_len_larger_than_the_pool(tmp_path, capsys) -> None:
    path = write(tmp_path, with_("engine", max_model_len=2048))  # 64 blocks x 16 = 1024 tokens
    line = run_file(capsys, tmp_path, path)
    assert line.startswith(f"error: {path}: max_model_len: ")


@pytest.mark.parametrize("assignment, key, words", [
    ("kv.blok_size=32", "kv.blok_size", "unknown key"),
    ("kv.block_size=0", "kv.block_size", "greater than 0"),
    ("name.first=1", "name.first", "not a mapping"),
    ("kv.block_size", "kv.block_size", "key.path=value"),
    ("kv..block_size=3", "kv..block_size", "empty key"),
    # a value beginning with "-" is still --set's (argparse alone would read it as an option)
    ("-.inf", "-.inf", "key.path=value"),
    ("-x=1", "-x", "unknown key"),
    (": :", "--set", "got ': :'"),  # found by the fuzz tests: a key with ": " made the error line ambiguous
    ("seed=-1", "seed", "greater than or equal to 0"),
])
def test_bad_set_names_file_and_key(tmp_path, capsys, assignment, key, words) -> None:
    path = write(tmp_path, GOOD)
    line = run_file(capsys, tmp_path, path, assignment)
    assert line.startswith(f"error: {path}: {key}: "), line
    assert words in line


def test_set_overrides_are_applied(tmp_path, capsys) -> None:
    """--set reaches the run: an override that makes the prompt too long is caught."""
    path = write(tmp_path, GOOD)
    line = run_file(capsys, tmp_path, path, "engine.max_model_len=20")
    assert line.startswith(f"error: {path}: workload.prompt_tokens")


def test_a_closed_pipe_ends_the_command_quietly():
    """``sim kv --json | head -c 10``: the reader went away; no traceback, the shell's SIGPIPE status."""
    import subprocess
    import sys

    code = ("import sys\nfrom sim.errors import cli_exit_code\n"
            "def command():\n    print('x' * 100)\n    raise BrokenPipeError(32, 'Broken pipe')\n"
            "sys.exit(cli_exit_code(command))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 141
    assert proc.stderr == ""

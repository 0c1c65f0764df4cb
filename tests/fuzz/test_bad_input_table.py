"""Hand-picked hostile inputs, each with the exact file and key its one error line names
(exit 2), checked through the real CLI. Sizes past the ceilings must be refused at load,
before anything is allocated, so each case is quick whatever it asks for."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from fuzzkit import REPO, TINY, error_parts, run_args, run_cli, write_yaml

INF, NAN = float("inf"), float("nan")


def _with(path: str, value, base=TINY) -> dict:
    data = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = data
    for k in parents:
        node = node.setdefault(k, {})
    if value is _DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return data


_DELETE = object()
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))

# (id, scenario mapping or YAML text, extra --set, expected key in the error line)
SCENARIO_CASES = [
    ("swap-inf", _with("kv.swap_space_gb", INF), [], "kv.swap_space_gb"),
    ("swap-nan", _with("kv.swap_space_gb", NAN), [], "kv.swap_space_gb"),
    ("swap-huge", _with("kv.swap_space_gb", 1e12), [], "kv.swap_space_gb"),
    ("duration-inf", _with("workload.duration_s", INF), [], "workload.duration_s"),
    ("duration-1e12", _with("workload.duration_s", 1e12, _with("workload.num_requests", _DELETE)), [],
     "workload.duration_s"),
    ("rate-x-duration", _with("workload.duration_s", 1e6, _with("workload.num_requests", _DELETE)), [],
     "workload.duration_s"),
    ("num-requests-1e10", _with("workload.num_requests", 10**10), [], "workload.num_requests"),
    ("blocks-1e10", _with("engine.num_gpu_blocks_override", 10**10), [], "engine.num_gpu_blocks_override"),
    ("max-model-len-huge", _with("engine.max_model_len", 10**9), [], "engine.max_model_len"),
    ("rate-inf", _with("workload.arrival.rate", INF), [], "workload.arrival.rate"),
    ("rate-tiny", _with("workload.arrival.rate", 1e-300), [], "workload.arrival.rate"),
    ("lognormal-1e300", _with("workload.prompt_tokens", {"type": "lognormal", "median": 1e300, "sigma": 1.0}),
     [], "workload.prompt_tokens.median"),
    ("lognormal-sigma-nan", _with("workload.prompt_tokens", {"type": "lognormal", "median": 10.0, "sigma": NAN}),
     [], "workload.prompt_tokens.sigma"),
    ("zipf-support-huge", _with("workload.output_tokens", {"type": "zipf", "a": 1.1, "max": 10**9}),
     [], "workload.output_tokens.max"),
    ("slo-inf", _with("slo.ttft_s", INF), [], "slo.ttft_s"),
    ("think-inf", _with("workload.conversation", {"turns": {"type": "fixed", "value": 2}, "think_time_s": INF}),
     [], "workload.conversation.think_time_s"),
    ("turns-huge", _with("workload.conversation", {"turns": {"type": "fixed", "value": 10**6}}),
     [], "workload.conversation.turns"),
    ("gamma-cv-tiny", _with("workload.arrival", {"type": "gamma", "rate": 1.0, "cv": 1e-300}),
     [], "workload.arrival.cv"),
    ("speedup-zero-ish", _with("workload.trace", {"path": "x.csv", "speedup": 1e-300},
                               _with("workload", {"num_requests": 3})), [], "workload.trace.speedup"),
    ("seed-2e63", _with("seed", 2**64), [], "seed"),
    ("alias-bomb", BOMB, [], "<yaml>"),
    ("self-alias", "a: &a [*a]\n", [], "<yaml>"),
    ("deep-nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n", [], "line 1"),
    ("huge-integer", "seed: " + "9" * 5000 + "\n", [], "<yaml>"),
    ("not-a-mapping", "- 1\n- 2\n", [], "<top>"),
    ("tab-indent", "engine:\n\tmax_model_len: 3\n", [], "line 2"),
    ("python-tag", "seed: !!python/object:os.system x\n", [], "line 1"),
    ("set-no-equals", TINY, ["--set", "kv.block_size"], "kv.block_size"),
    ("set-empty-key", TINY, ["--set", "kv..block_size=3"], "kv..block_size"),
    ("set-bad-yaml", TINY, ["--set", "kv.block_size=[1"], "kv.block_size"),
    ("set-alias-bomb", TINY, ["--set", "name=&a [*a]"], "name"),
    ("set-unknown-key", TINY, ["--set", "kv.blok_size=3"], "kv.blok_size"),
    ("set-wrong-type", TINY, ["--set", "kv.block_size=big"], "kv.block_size"),
    ("set-inf", TINY, ["--set", "kv.swap_space_gb=.inf"], "kv.swap_space_gb"),
    # pipeline parallelism (#15): pp in {1, 2, 4, 8}, at most the model's layers (tiny-llama has 2)
    ("pp-3", _with("engine.pipeline_parallel_size", 3), [], "engine.pipeline_parallel_size"),
    ("pp-bool", _with("engine.pipeline_parallel_size", True), [], "engine.pipeline_parallel_size"),
    ("pp-float", _with("engine.pipeline_parallel_size", 2.0), [], "engine.pipeline_parallel_size"),
    ("pp-over-layers", _with("engine.pipeline_parallel_size", 4), [], "engine.pipeline_parallel_size"),
    # replicas of vLLM V0's pipeline form stay refused (batch-queue replicas run: sim/engine/pipeline/cluster.py)
    ("pp-with-replicas", _with("cluster.num_replicas", 2, _with("engine.pipeline_mode", "virtual-engines",
                                                                _with("engine.pipeline_parallel_size", 2))), [],
     "cluster.num_replicas"),
    ("pp-disaggregated", _with("cluster", {"disaggregation": {"prefill_replicas": 1, "decode_replicas": 1,
                                                              "kv_transfer": {"bandwidth_gbps": 400}}},
                               _with("engine.pipeline_parallel_size", 2)), [], "cluster.disaggregation"),
    ("set-through-scalar", TINY, ["--set", "seed.x=1"], "seed.x"),
    ("key-with-newline", {**TINY, "bad\nkey": 1}, [], "bad\\nkey"),
    # disaggregated prefill/decode (sim/config/cluster_schema.py, sim/engine/disagg/pools.py)
    ("pd-split-without-link", _with("cluster", {"disaggregation": {"prefill_replicas": 1, "decode_replicas": 1}}),
     [], "cluster.disaggregation"),
    ("pd-zero-decode", _with("cluster", {"disaggregation": {"prefill_replicas": 1, "decode_replicas": 0,
                                                             "kv_transfer": {"bandwidth_gbps": 400}}}),
     [], "cluster.disaggregation.decode_replicas"),
    ("pd-unknown-key", _with("cluster", {"disaggregation": {"prefill_replicas": 1, "decode_replicas": 1, "ratio": 2,
                                                             "kv_transfer": {"bandwidth_gbps": 400}}}),
     [], "cluster.disaggregation.ratio"),
    ("pd-link-zero-bandwidth", _with("cluster", {"disaggregation": {"prefill_replicas": 1, "decode_replicas": 1,
                                                                     "kv_transfer": {"bandwidth_gbps": 0}}}),
     [], "cluster.disaggregation.kv_transfer.bandwidth_gbps"),
    ("pd-replicas-mismatch", _with("cluster", {"num_replicas": 3, "disaggregation": {
        "prefill_replicas": 1, "decode_replicas": 1, "kv_transfer": {"bandwidth_gbps": 400}}}), [], "cluster"),
    ("pd-bad-pool-override", _with("cluster", {"disaggregation": {
        "prefill_replicas": 1, "decode_replicas": 1, "kv_transfer": {"bandwidth_gbps": 400},
        "decode": {"engine": {"tensor_parallel_size": 3}}}}), [],
     "cluster.disaggregation.decode.engine.tensor_parallel_size"),
    ("pd-unknown-pool-key", _with("cluster", {"disaggregation": {
        "prefill_replicas": 1, "decode_replicas": 1, "kv_transfer": {"bandwidth_gbps": 400},
        "prefill": {"engine": {"max_modl_len": 3}}}}), [], "cluster.disaggregation.prefill.engine.max_modl_len"),
    ("pd-static-pool", _with("cluster", {"disaggregation": {
        "prefill_replicas": 1, "decode_replicas": 1, "kv_transfer": {"bandwidth_gbps": 400},
        "decode": {"scheduler": {"policy": "static"}}}}), [], "cluster.disaggregation.decode.scheduler.policy"),
]


@pytest.mark.parametrize("case", SCENARIO_CASES, ids=[c[0] for c in SCENARIO_CASES])
def test_hostile_scenarios(tmp_path: Path, capsys, case) -> None:
    _, data, sets, key = case
    scenario = write_yaml(tmp_path / "s.yaml", data)
    code, err = run_cli(capsys, run_args(scenario, tmp_path / "out", *sets), "table: scenario")
    assert code == 2, err
    file, got_key, message = error_parts(err)
    assert (file, got_key) == (str(scenario), key), err
    assert "\n" not in err.strip() and len(err) < 2000


def test_sweep_refuses_an_alias_bomb_before_expanding(tmp_path: Path, capsys) -> None:
    scenario = write_yaml(tmp_path / "s.yaml", BOMB)
    code, err = run_cli(capsys, ["sweep", str(scenario), "--grid", "kv.block_size=8,16",
                                 "--out", str(tmp_path / "sw"), "--quiet"], "table: sweep")
    assert code == 2 and error_parts(err)[:2] == (str(scenario), "<yaml>"), err


def _special_paths(tmp_path: Path) -> list[tuple[str, Path, str]]:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: caf\xe9\n")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (9 << 20))
    return [("missing", tmp_path / "nope.yaml", "file not found"), ("directory", tmp_path, "directory"),
            ("fifo", fifo, "not a regular file"), ("non-utf8", bad, "not UTF-8"), ("huge", big, "bytes")]


def test_special_scenario_paths(tmp_path: Path, capsys) -> None:
    """A missing file, a directory, a FIFO (never opened: it would block), non-UTF-8, too big."""
    for name, path, fragment in _special_paths(tmp_path):
        code, err = run_cli(capsys, run_args(path, tmp_path / "out"), "table: scenario path")
        assert code == 2, (name, err)
        file, key, message = error_parts(err)
        assert (file, key) == (str(path), "<file>") and fragment in message, (name, err)


TRACE_CASES = [
    ("short-row", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n1,5\n", "line 3"),
    ("extra-cell", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5,SECRET\n", "line 2"),
    ("non-numeric", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,SECRET,5\n",
     "line 2, column num_prefill_tokens"),
    ("negative", "arrived_at,num_prefill_tokens,num_decode_tokens\n-1,5,5\n", "line 2, column arrived_at"),
    ("nan", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,nan\n", "line 2, column num_decode_tokens"),
    ("inf-time", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\ninf,5,5\n", "line 3, column arrived_at"),
    ("unsorted", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\n9,5,5\n3,5,5\n",
     "line 4, column arrived_at"),
    ("fraction-tokens", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5.5,5\n",
     "line 2, column num_prefill_tokens"),
    ("huge-tokens", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1e14,5\n",
     "line 2, column num_prefill_tokens"),
    ("empty", "", "<file>"),
    ("header-only", "arrived_at,num_prefill_tokens,num_decode_tokens\n", "<file>"),
    ("missing-column", "SECRET,num_prefill_tokens,num_decode_tokens\n0,5,5\n", "arrived_at"),
    ("nul-byte", "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5\x00,5\n", "line 2, column num_prefill_tokens"),
    ("non-utf8", b"arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,5\xff SECRET\n", "<file>"),
]


@pytest.mark.parametrize("case", TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
def test_hostile_traces(tmp_path: Path, capsys, case) -> None:
    _, content, key = case
    trace = tmp_path / "trace.csv"
    trace.write_bytes(content if isinstance(content, bytes) else content.encode())
    scenario = write_yaml(tmp_path / "s.yaml", {**TINY, "workload": {"trace": {"path": str(trace)}}})
    code, err = run_cli(capsys, run_args(scenario, tmp_path / "out"), "table: trace")
    assert code == 2, err
    assert error_parts(err)[:2] == (str(trace), key), err
    assert "SECRET" not in err


def test_trace_of_the_environment_is_not_echoed(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KVSIM_FUZZ_SECRET", "hunter2hunter2")
    scenario = write_yaml(tmp_path / "s.yaml",
                          {**TINY, "workload": {"trace": {"path": "/proc/self/environ"}}})
    code, err = run_cli(capsys, run_args(scenario, tmp_path / "out"), "table: trace")
    assert code == 2 and error_parts(err)[0] == "/proc/self/environ", err
    assert "hunter2" not in err and "KVSIM_FUZZ_SECRET" not in err


BASE_CAL = yaml.safe_load((REPO / "calibrations" / "a100-80gb.yaml").read_text())
CAL_CASES = [
    ("memory-1e20", {"memory_bytes": 10**20}, "memory_bytes"),
    ("memory-inf", {"memory_bytes": INF}, "memory_bytes"),
    ("bandwidth-nan", {"hbm_bandwidth_bytes_per_s": NAN}, "hbm_bandwidth_bytes_per_s"),
    ("bandwidth-tiny", {"hbm_bandwidth_bytes_per_s": 1e-300}, "hbm_bandwidth_bytes_per_s"),
    ("flops-1e300", {"peak_flops": 1e300}, "peak_flops"),
    ("pcie-inf", {"pcie_bandwidth_bytes_per_s": INF}, "pcie_bandwidth_bytes_per_s"),
    ("launch-huge", {"kernel_launch_s": 1e9}, "kernel_launch_s"),
    ("m-half-inf", {"compute_efficiency": {"eff_max": 0.7, "m_half_tokens": INF}}, "compute_efficiency.m_half_tokens"),
    ("provenance-nested", {"provenance": {"date": {"a": 1}}}, "provenance.date"),
    ("pool-of-billions", {"memory_bytes": 1 << 42}, "num_gpu_blocks_override"),
]


@pytest.mark.parametrize("case", CAL_CASES, ids=[c[0] for c in CAL_CASES])
def test_hostile_calibrations(tmp_path: Path, capsys, case) -> None:
    _, changes, key = case
    cal = write_yaml(tmp_path / "cal.yaml", {**BASE_CAL, **changes})
    sc = {**TINY, "gpu": str(cal)}
    if key == "num_gpu_blocks_override":  # a valid 4 TiB card: the pool it implies is refused
        sc = {**sc, "engine": {"max_model_len": 256}, "kv": {"block_size": 1}}
        key = "block_size"
    scenario = write_yaml(tmp_path / "s.yaml", sc)
    code, err = run_cli(capsys, run_args(scenario, tmp_path / "out"), "table: calibration")
    assert code == 2, err
    file, got_key, _ = error_parts(err)
    expected_file = str(scenario) if key == "block_size" else str(cal)
    assert (file, got_key) == (expected_file, key), err

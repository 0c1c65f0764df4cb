"""Random mutations of the shipped scenarios through `sim run`: wrong types, out-of-range
and non-finite numbers, unknown keys, missing sections. Every case either runs (exit 0,
a finite summary.json) or ends in one ``error: <file>: <key>: ...`` line naming the
scenario (or the data file at fault) with exit 2. Runs are bounded by sizes: every valid
size drawn is small, and ``--set`` caps the requests and their output tokens."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from fuzzkit import SCENARIOS, TINY, error_parts, run_args, run_cli, write_yaml

SHIPPED = ["chatbot", "seed-8gb-card", "shared-prompt-cache", "rag-long-context", "overload-victims",
           "azure-conv", "paged-throughput"]
#: Optional keys the shipped files may not have, so they can be mutated too.
EXTRA_PATHS = [
    "seed", "engine.num_gpu_blocks_override", "engine.activation_peak_bytes", "engine.runtime_overhead_bytes",
    "engine.kv_quant_group_size", "kv.swap_space_gb", "kv.token_eviction.window_tokens",
    "kv.token_eviction.policy", "scheduler.max_num_seqs", "scheduler.max_num_batched_tokens",
    "scheduler.watermark", "workload.duration_s", "workload.max_tokens", "workload.shared_prefix.num_prefixes",
    "workload.shared_prefix.prefix_tokens", "workload.shared_prefix.zipf_a", "slo.ttft_s", "slo.tpot_s",
    "workload.conversation.think_time_s", "workload.conversation.turns.value", "workload.arrival.cv",
]
#: Numbers a typo or a hostile file gives: small valid ones and ones past every ceiling.
NUMBERS = [-1, 0, 1, 2, 3, 7, 100, 0.5, 1.5, -0.25, 1e300, -1e300, 10**20, 2**31, 2**63, 1e-320,
           float("inf"), float("-inf"), float("nan"), "1e12", "12", "", "inf"]
VALUES = st.one_of(
    st.sampled_from(NUMBERS), st.sampled_from([1, 2, 3, 7, 100, 0.5, 0.9, 1.5]), st.booleans(), st.none(), st.text(max_size=12),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.sampled_from(["a", "type", "value"]),
                                                               st.integers(0, 3), max_size=2),
    st.sampled_from(["fixed", "zipf", "lognormal", "gamma", "paged", "swap", "fp8", "streaming", "qwen2.5-7b"]),
)


def _load(name: str) -> dict:
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    for section, key in (("workload", "trace"), ("workload", "prompt_tokens"), ("workload", "output_tokens")):
        node = data.get(section, {}).get(key)
        if isinstance(node, dict) and "path" in node:  # relative to the shipped file: make absolute
            node["path"] = str((SCENARIOS / node["path"]).resolve())
    if str(data.get("model", "")).endswith(".json"):
        data["model"] = str((SCENARIOS / data["model"]).resolve())
    return data


BASES = {"tiny": TINY, **{name: _load(name) for name in SHIPPED}}


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))


def _mutate(data: dict, path: tuple, op: str, value) -> None:
    node = data
    for k in path[:-1]:
        nxt = node.get(k) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            nxt = node[k] = {}
        node = nxt
    if op == "delete":
        node.pop(path[-1], None)
    elif op == "unknown-key":
        node[f"{path[-1]}_typo"] = value
    else:
        node[path[-1]] = value


@st.composite
def mutations(draw):
    base = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[base])
    candidates = sorted(set(_paths(data)) | {tuple(p.split(".")) for p in EXTRA_PATHS})
    count = draw(st.integers(1, 2))
    touched = []
    for _ in range(count):
        path = draw(st.sampled_from(candidates))
        op = draw(st.sampled_from(["set", "set", "set", "delete", "unknown-key"]))
        _mutate(data, path, op, draw(VALUES))
        touched.append(".".join(path))
    return base, data, touched


def _bounds(touched: list[str]) -> list[str]:
    """--set caps that keep a valid case fast, unless the case is about that key."""
    out = []
    for key, value in (("workload.num_requests", 6), ("workload.max_tokens", 24)):
        if not any(t.startswith(key) or key.startswith(t) for t in touched):
            out += ["--set", f"{key}={value}"]
    return out


_case = itertools.count()


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=mutations())
def test_mutated_scenarios_run_or_fail_with_one_line(tmp_path: Path, capsys, case) -> None:
    base, data, touched = case
    n = next(_case)
    scenario = write_yaml(tmp_path / f"s{n}.yaml", data)
    out = tmp_path / f"out{n}"
    code, err = run_cli(capsys, run_args(scenario, out, *_bounds(touched)), kind="scenario mutation", out_dir=out)
    if code == 2:
        file, key, _ = error_parts(err)
        data_files = {str(v["path"]) for v in _data_refs(data)}
        assert file == str(scenario) or file in data_files, err


def _data_refs(data):
    wl = data.get("workload") if isinstance(data, dict) else None
    if not isinstance(wl, dict):
        return []
    return [v for v in wl.values() if isinstance(v, dict) and isinstance(v.get("path"), str)]


@pytest.mark.parametrize("name", ["chatbot", "azure-conv", "seed-8gb-card"])
def test_unmutated_bases_run(tmp_path: Path, capsys, name: str) -> None:
    """The fuzz bases are valid: a mutation, not the base, is what fails."""
    scenario = write_yaml(tmp_path / "s.yaml", BASES[name])
    out = tmp_path / "out"
    code, err = run_cli(capsys, run_args(scenario, out, *_bounds([])), kind="scenario (unmutated)", out_dir=out)
    assert code == 0, err

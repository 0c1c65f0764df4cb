"""A tiny plan (tiny-llama, 64 KV blocks, eager profile): every search takes well under a second."""

from __future__ import annotations

import copy

import pytest
import yaml

TINY_PLAN = {
    "name": "tiny-plan",
    "base": {
        "name": "tiny", "seed": 3, "model": "tiny-llama", "gpu": "a100-80gb",
        "engine": {"profile": "eager", "max_model_len": 512, "num_gpu_blocks_override": 64},
        "kv": {"allocator": "paged", "block_size": 16},
        "scheduler": {"policy": "continuous", "max_num_seqs": 16},
        "workload": {"arrival": {"type": "poisson", "rate": 10},
                     "prompt_tokens": {"type": "uniform", "low": 20, "high": 200},
                     "output_tokens": {"type": "uniform", "low": 10, "high": 100}},
    },
    "slo": {"ttft_s": 0.05, "tpot_s": 0.005, "percentile": 90, "attainment": 0.9},
    "target_rate": 100,
    "space": {"scheduler.max_num_seqs": [4, 16]},
    "search": {"min_rate": 10, "max_rate": 1000, "tolerance": 0.05, "num_requests": 150,
               "min_duration_s": 2, "confirm_duration_s": 8},
}


@pytest.fixture
def tiny_plan():
    return copy.deepcopy(TINY_PLAN)


@pytest.fixture
def write_plan(tmp_path):
    def write(doc: dict, name: str = "plan.yaml") -> str:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return str(path)
    return write


@pytest.fixture
def assert_refused(tmp_path, capsys):
    """``check(path, key_prefix, message)``: the plan at ``path`` is refused by ``load_plan``
    naming the file and a key under ``key_prefix``, and by ``sim plan`` with exit 2, one
    ``error: <path>: ...`` line holding ``message``, and no output folder."""
    from sim.cli.main import main
    from sim.errors import ConfigError
    from sim.plan.spec import load_plan

    def check(path: str, key_prefix: str, message: str) -> None:
        with pytest.raises(ConfigError) as err:
            load_plan(path)
        assert err.value.file == path and err.value.key.startswith(key_prefix)
        assert main(["plan", path, "--out", str(tmp_path / "out"), "--quiet"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {path}: ") and message in lines[0], lines
        assert not (tmp_path / "out").exists()
    return check

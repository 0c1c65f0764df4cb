"""Shared helpers for the simulator-core tests: tiny requests and tiny scenarios.

Kept as fixtures (not an importable module) so tests in this folder need no package setup.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from sim.request import Request

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


def new_request(request_id: int, prompt, *, output: int = 1, max_tokens: int | None = None,
                arrival_s: float = 0.0) -> Request:
    """A request whose prompt is ``prompt`` tokens of its own segment, or the given segments."""
    if isinstance(prompt, int):
        segments = ((1000 + request_id, prompt),)
    else:
        segments = tuple(prompt)
    return Request(request_id, arrival_s, segments,
                   max_tokens if max_tokens is not None else max(output, 1), output)


@pytest.fixture(scope="session")
def make_request():
    return new_request


def base_scenario(**sections) -> dict:
    """A tiny world as a raw scenario mapping: tiny-llama, 11 blocks of 16 tokens, mml 160.

    ``engine``, ``kv``, ``scheduler`` update those sections key by key; any other key,
    ``workload`` included, replaces the default outright.
    """
    data = {
        "name": "tiny",
        "seed": 1,
        "model": "tiny-llama",
        "gpu": "a100-80gb",
        "engine": {"max_model_len": 160, "num_gpu_blocks_override": 11},
        "kv": {"allocator": "paged", "block_size": 16},
        "scheduler": {"policy": "continuous"},
        "workload": {
            "num_requests": 6,
            "arrival": {"type": "constant", "rate": 50.0},
            "prompt_tokens": {"type": "uniform", "low": 8, "high": 60},
            "output_tokens": {"type": "uniform", "low": 1, "high": 60},
        },
    }
    for key, value in sections.items():
        if key in ("engine", "kv", "scheduler"):
            data[key] = {**data[key], **copy.deepcopy(value)}
        else:
            data[key] = copy.deepcopy(value)
    return data


@pytest.fixture(scope="session")
def scenario_dict():
    return base_scenario


@pytest.fixture(scope="session")
def scenarios_dir() -> Path:
    return SCENARIOS

"""Shared helpers for the ``sim serve`` tests: a small scenario with a trace of arrivals, and
the server run in-process on a free port while a client coroutine talks to it."""

from __future__ import annotations

import asyncio
import random

import pytest
import yaml

from sim.config.scenario import load_scenario
from sim.serve.server import serve

#: Llama-3-8B on an A100 under vLLM V1's profile (chunked prefill, prefix caching, the API
#: server's front end), as the shipped chatbot scenario; the trace is the test's arrivals.
BASE = {
    "name": "serve-test", "seed": 1, "model": "llama-3-8b", "gpu": "a100-80gb",
    "engine": {"profile": "vllm-v1", "max_model_len": 4096},
    "kv": {"allocator": "paged", "block_size": 16},
    "scheduler": {"max_num_seqs": 64},
}


def write_scenario(tmp_path, rows, **sections) -> str:
    """A scenario replaying ``rows`` ((arrival s, prompt tokens, output tokens)) as a trace."""
    trace = tmp_path / "arrivals.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                     + "".join(f"{a!r},{p},{o}\n" for a, p, o in rows))
    doc = {**BASE, **{k: {**BASE.get(k, {}), **v} for k, v in sections.items()},
           "workload": {"trace": {"path": str(trace)}}}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def token_ids(n: int, rng: random.Random) -> list[int]:
    """A prompt of ``n`` random token ids (no two tests' prompts share a prefix)."""
    return [rng.randrange(1, 128000) for _ in range(n)]


def run_served(scenario: str, client, *, time_scale: float = 1.0, overrides=(), **kw):
    """Serve ``scenario`` on a free port, run ``await client(base_url)``, then drain as
    SIGTERM would; returns (the client's result, what was served)."""

    async def main():
        sc = load_scenario(scenario, list(overrides))
        stop = asyncio.Event()
        port = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve(sc, host="127.0.0.1", port=0, time_scale=time_scale, stop=stop,
                                         ready=lambda ports: port.set_result(ports[0]), **kw))
        await asyncio.wait((port, task), return_when=asyncio.FIRST_COMPLETED)
        if not port.done():
            await task  # it failed before listening: its error
        base = f"http://127.0.0.1:{port.result()}"
        try:
            result = await client(base)
        finally:
            stop.set()
        return result, await task

    return asyncio.run(main())


@pytest.fixture
def rng():
    return random.Random(44)


REPO = __import__("pathlib").Path(__file__).resolve().parents[3]


class ServeProcess:
    """``sim serve`` as a user starts it: a child process on a free port (its first line says
    which); ``stop()`` sends SIGTERM and returns (exit status, everything it wrote to stderr)."""

    def __init__(self, *args: str) -> None:
        import os
        import subprocess
        import sys

        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "serve", *args, "--port", "0"],
                                     stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        self.first_line = self.proc.stderr.readline()
        if "http://" not in self.first_line:
            self.proc.kill()
            raise AssertionError(f"sim serve did not start: {self.first_line}{self.proc.stderr.read()}")
        #: every URL it listens on (one per replica under --replica-ports), without /v1
        self.bases = ["http://" + part.split("/v1", 1)[0] for part in self.first_line.split("http://")[1:]]
        self.base = self.bases[0]

    def stop(self, timeout: float = 30) -> tuple[int, str]:
        import signal

        self.proc.send_signal(signal.SIGTERM)
        rest = self.proc.stderr.read()
        return self.proc.wait(timeout), self.first_line + rest

"""`sim sweep`'s local workers die with their parent: on SIGTERM or SIGINT the parent kills
them before exiting; after SIGKILL (no cleanup at all) each worker notices and exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # state, ppid, ...


def workers_of(parent: int) -> list[int]:
    """The spawned pool workers whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) and int(st[1]) == parent:
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in cmdline:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def wait_until(check, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.1)
    return check()


@pytest.mark.parametrize("sig, rc, words", [
    (signal.SIGTERM, 143, "error: terminated; finished points are kept"),
    (signal.SIGINT, 130, "error: interrupted; finished points are kept"),
    (signal.SIGKILL, -signal.SIGKILL, ""),
])
def test_killing_the_parent_leaves_no_worker_alive(tmp_path, tiny_sweep_scenario, sig, rc, words):
    scenario = tmp_path / "slow.yaml"
    slow = {**tiny_sweep_scenario, "workload": {**tiny_sweep_scenario["workload"], "num_requests": 2_000_000}}
    scenario.write_text(yaml.safe_dump(slow))
    argv = [sys.executable, "-c", "import sys; from sim.cli.main import main; sys.exit(main())",
            "sweep", str(scenario), "--grid", "kv.block_size=16,32", "--out", str(tmp_path / "sw"),
            "--workers", "2", "--quiet"]
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[3])
    workers: list[int] = []
    try:
        assert wait_until(lambda: len(workers_of(parent.pid)) == 2 or parent.poll() is not None, 60)
        workers = workers_of(parent.pid)
        assert len(workers) == 2, parent.communicate(timeout=5)
        time.sleep(1.0)  # let them start their points
        assert all(alive(w) for w in workers)
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=30)
        assert parent.returncode == rc, err
        assert words in err and (not words or err.count("\n") == 1), err
        assert wait_until(lambda: not any(alive(w) for w in workers), 10), "a worker outlived its parent"
    finally:
        for pid in [parent.pid, *workers]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.wait(timeout=10)

"""The layering rules of docs/ARCHITECTURE.md, checked: import contracts, no import cycles,
a torch-free simulator, module sizes, and the Python version the project states."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("sim", "realengine", "microbench", "validation", "kernels")
NEVER_IN_THE_SIMULATOR = ("torch", "triton", "kernels", "microbench", "realengine", "validation")
MAX_MODULE_LINES = 320  # "about 300": a module past this wants splitting


def test_import_contracts_hold():
    """``lint-imports`` (import-linter) checks the contracts in pyproject.toml."""
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycles_between_modules():
    """Function-local imports count too: a cycle hidden in a function is still a cycle."""
    graph = grimp.build_graph(*PACKAGES)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_sim_run_loads_no_torch_kernels_or_real_engine(tmp_path):
    """The simulator's main job imports none of the GPU side, in a fresh interpreter."""
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(json.dumps({
        "name": "tiny", "seed": 1, "model": "tiny-llama", "gpu": "a100-80gb",
        "engine": {"max_model_len": 256},
        "workload": {"num_requests": 20, "arrival": {"type": "poisson", "rate": 10.0},
                     "prompt_tokens": {"type": "uniform", "low": 10, "high": 100},
                     "output_tokens": {"type": "uniform", "low": 5, "high": 50}}}))
    code = ("import json, sys\n"
            "from sim.cli.main import main\n"
            f"rc = main(['run', {str(scenario)!r}, '--out', {str(tmp_path / 'out')!r}, '--quiet'])\n"
            "print(json.dumps([rc, sorted({m.split('.')[0] for m in sys.modules})]))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rc, roots = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rc == 0 and (tmp_path / "out" / "report.html").exists()
    assert "sim" in roots and "simpy" in roots  # the check sees what was imported
    assert [name for name in NEVER_IN_THE_SIMULATOR if name in roots] == []


def _modules():
    for package in PACKAGES:
        yield from sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("path", list(_modules()), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_is_too_long(path):
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES


def _floor() -> tuple[int, int]:
    spec = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec)
    assert match, f"requires-python should be a plain floor, got {spec!r}"
    return int(match[1]), int(match[2])


def test_the_stated_python_floor_is_the_one_the_code_needs():
    """The code uses 3.11 features (enum.StrEnum, tomllib): the floor says so, and this runs on it
    or above. CI runs on the floor itself (.ci/run checks that)."""
    assert _floor() == (3, 11)
    assert sys.version_info[:2] >= _floor()
    uses_strenum = [p for p in _modules() if "StrEnum" in p.read_text()]
    assert uses_strenum  # the reason for the floor is still there

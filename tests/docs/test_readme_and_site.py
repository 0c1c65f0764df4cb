"""The README stays short and true, and the documentation site builds.

The README is the front page: at most 300 lines, the Quickstart within its first 60, the two
commands CI and users run (.ci/run reads the test command from it verbatim), links that resolve,
and the `sim kv` output it shows is what `sim kv` prints. Everything else lives in docs/, the
MkDocs site (mkdocs.yml), whose nav must hold every page; CI builds it with
`mkdocs build --strict` (.ci/run), and so does the last test here where mkdocs is installed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"
RUN_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/sim run scenarios/chatbot.yaml"


def _readme() -> list[str]:
    return README.read_text().splitlines()


def _block_after(lines: list[str], command: str) -> list[str]:
    """The lines of the console block that starts with ``$ <command>``."""
    start = lines.index(f"$ {command}")
    end = next(i for i in range(start, len(lines)) if lines[i] == "```")
    return lines[start + 1:end]


def test_the_readme_is_short_with_the_quickstart_first() -> None:
    lines = _readme()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail into docs/"
    assert "## Quickstart" in lines[:60]
    assert RUN_COMMAND in lines[:60]


def test_ci_runs_the_readmes_test_command_verbatim() -> None:
    ci = CI.read_text().splitlines()
    marker = ci.index("# The test command from README.md, verbatim:")
    command = ci[marker + 1]
    assert command.startswith("python3 -m venv .venv") and command.endswith(".venv/bin/pytest")
    assert command in _readme()[:60], "the README's test command and .ci/run's differ"


def test_readme_links_resolve() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target = (ROOT / link.split("#", 1)[0]).resolve()
        assert target.exists(), f"README.md links to {link}, which does not exist"
        assert ROOT in target.parents or target == ROOT, f"README.md links outside the repository: {link}"


def _nav_pages(nav) -> set[str]:
    pages = set()
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            pages |= _nav_pages(value)
        else:
            pages.add(value)
    return pages


def test_every_docs_page_is_in_the_nav_and_every_nav_page_exists() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert nav == on_disk
    for page in ("ARCHITECTURE.md", "CONFORMANCE.md", "MEASURED_KERNELS.md", "reference/scenario.md"):
        assert page in nav


def test_every_readme_docs_link_is_a_site_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    for link in re.findall(r"\]\(docs/([^)#\s]+)", README.read_text()):
        assert link in nav, f"README.md links to docs/{link}, which the site's nav lacks"


def test_nothing_points_outside_the_repository() -> None:
    texts = [README.read_text(), (ROOT / "mkdocs.yml").read_text()]
    texts += [p.read_text() for p in (ROOT / "docs").rglob("*.md")]
    for text in texts:
        assert "../shared" not in text and "](/" not in text


def test_the_readmes_sim_kv_output_is_what_sim_kv_prints() -> None:
    command = "sim kv --model llama-3-8b --gpu h100-sxm --max-model-len 8192"
    shown = [line for line in _block_after(_readme(), command) if line != "..."]
    assert len(shown) >= 8
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    out = subprocess.run([sys.executable, "-m", "sim.cli.main", *command.split()[1:]], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    printed = {line.rstrip() for line in out.splitlines()}
    missing = [line for line in shown if line not in printed]
    assert not missing, f"README.md's sim kv block differs from sim kv's output (rerun it and paste): {missing}"


def test_the_readmes_sim_run_output_has_the_runs_memory_plan() -> None:
    """The run's table shows the same pool as `sim kv` of its model and GPU; the rest of that block
    moves with the cost model, so only its shape is checked here."""
    shown = _block_after(_readme(), "sim run scenarios/chatbot.yaml")
    labels = [line.split()[0] for line in shown if line and line[0].isalpha()]
    for label in ("policies", "requests", "throughput", "kv", "memory", "preemptions", "simulated", "wrote"):
        assert label in labels
    assert any("arrived 3000, completed 3000, rejected 0" in line for line in shown)
    sweep = _block_after(_readme(), "sim sweep scenarios/chatbot.yaml --grid scheduler.policy=continuous,chunked-prefill \\")
    assert any("points       8: ok 8" in line for line in sweep)


def test_the_site_builds_strictly(tmp_path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "site" / "reference" / "scenario" / "index.html").read_text()
    assert "engine.max_model_len" in page and "16,777,216" in page
    recipes = (tmp_path / "site" / "guides" / "reproduce" / "index.html").read_text()
    assert "Memory breakdown" in recipes and "--8&lt;--" not in recipes  # scenarios/README.md included

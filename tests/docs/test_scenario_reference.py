"""docs/reference/scenario.md is generated from the scenario schema (docs/gen_scenario_reference.py):
the committed page must be what the generator writes now, and every key of the schema must be
documented on it with its type, default, bounds and description."""

from __future__ import annotations

import importlib.util
import re
import sys
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from sim.config import schema
from sim.config.limits import LIMITS
from sim.cost.profile import PROFILES

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "scenario.md"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_scenario_reference", ROOT / "docs" / "gen_scenario_reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _inner(annotation):
    """The models an annotation holds: a model, or the variants of a (discriminated) union."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) == 1:
                annotation = args[0]
            else:
                return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)], True
        else:
            break
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], False
    return [], False


def _walk(model, path="", seen=None):
    """(key path or None for a union variant's field, field name, field, model) for every field; a
    model met twice (both pools' overrides) is documented once, under its first key path."""
    seen = {} if seen is None else seen
    path = seen.setdefault(model, path)
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        key = f"{path}.{name}" if path else name
        yield key, name, field, model
        models, is_union = _inner(field.annotation)
        for sub in models:
            if is_union:
                for vname, vfield in sub.model_fields.items():
                    yield None, vname, vfield, sub
            else:
                yield from _walk(sub, key, seen)


def test_the_page_is_up_to_date(gen) -> None:
    stale = "docs/reference/scenario.md is stale: run python docs/gen_scenario_reference.py"
    assert PAGE.read_text() == gen.render(), stale


def test_every_key_has_a_description() -> None:
    missing = sorted({f"{m.__name__}.{name}" for key, name, field, m in _walk(schema.Scenario)
                      if name != "type" and not (field.description or "").strip()})
    assert not missing, f"give these fields Field(description=...): {missing}"


def _sections(page: str) -> dict[str, str]:
    """Heading (without backticks) -> the text under it, up to the next heading."""
    parts = re.split(r"^#+ (.+)$", page, flags=re.M)
    return {parts[i].strip("`"): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_key_is_on_the_page() -> None:
    sections = _sections(PAGE.read_text())
    for key, name, field, model in _walk(schema.Scenario):
        if key is not None:
            section = key.rsplit(".", 1)[0] if "." in key else "Top level"
            assert f"| `{name}` |" in sections[section], key
        elif name == "type":
            tag = typing.get_args(field.annotation)[0]
            assert f"type: {tag}" in sections, tag
        else:
            assert f"| `{name}` |" in PAGE.read_text(), (model.__name__, name)


def _row(page: str, key: str) -> list[str]:
    section, name = key.rsplit(".", 1) if "." in key else ("Top level", key)
    text = _sections(page)[section]
    line = next(x for x in text.splitlines() if x.startswith(f"| `{name}` |"))
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_rows_carry_the_schemas_types_defaults_and_bounds() -> None:
    page = PAGE.read_text()
    _, kind, default, meaning = _row(page, "engine.max_model_len")
    ceiling = int(LIMITS["engine.max_model_len"].max)
    assert kind == f"integer, 1 to {ceiling:,}"
    assert default == f"`{schema.EngineConfig.model_fields['max_model_len'].default}`"
    assert meaning == schema.EngineConfig.model_fields["max_model_len"].description
    _, kind, default, _ = _row(page, "scheduler.watermark")
    assert kind == "number, 0 ≤ x < 0.5" and default == "`0.0`"
    _, kind, default, _ = _row(page, "kv.allocator")
    assert kind == "one of `contiguous-static`, `contiguous-exact`, `paged`" and default == "`paged`"
    assert _row(page, "workload")[2] == "required"
    assert _row(page, "engine.num_gpu_blocks_override")[2] == "unset"


def test_profile_defaults_come_from_the_profiles() -> None:
    page = PAGE.read_text()
    policy = _row(page, "scheduler.policy")[2]
    chunking = [n for n, p in PROFILES.items() if p.chunked_prefill]
    assert chunking and policy.endswith("`chunked-prefill` for " + ", ".join(f"`{n}`" for n in chunking))
    table = page.split("## Defaults set by the engine profile", 1)[1]
    for name, prof in PROFILES.items():
        expected = "`chunked-prefill`" if prof.chunked_prefill else "`continuous`"
        assert f"| `{name}` | {expected} | `{str(prof.prefix_caching).lower()}` |" in table, name


def test_check_mode_fails_on_a_stale_page(gen, tmp_path, monkeypatch, capsys) -> None:
    page = tmp_path / "scenario.md"
    monkeypatch.setattr(gen, "PAGE", page)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1  # missing
    page.write_text(gen.render().replace("Longest sequence", "Shortest sequence"))
    assert gen.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0

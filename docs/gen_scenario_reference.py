"""Writes docs/reference/scenario.md from the scenario schema, so the page cannot drift from it.

The schema is sim/config/schema.py and its sub-modules (frozen pydantic v2 models). Every key's
type, default and bounds come from the models; its text is the field's ``description``; a
section's text is its model's docstring; the defaults an engine profile sets come from
sim/cost/profile.py and the limits outside the schema from the modules that enforce them.

    python docs/gen_scenario_reference.py          # rewrite the page
    python docs/gen_scenario_reference.py --check  # exit 1 if the page is out of date

tests/docs/test_scenario_reference.py fails when the committed page differs from what this writes.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import re
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import annotated_types as at
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from sim.config import arrival_schema, schema  # noqa: E402
if str(Path(__file__).resolve().parent) not in sys.path:  # its sibling module, loaded from anywhere
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenario_reference_tables import (  # noqa: E402
    HEADER, PIPELINE_MODES, PROFILE_DEFAULTS, PROFILES, _batch_defaults_section, _limits, _num, _profile_table,
)

PAGE = ROOT / "docs" / "reference" / "scenario.md"

#: The discriminated unions of the schema: their variants -> (the section's title, its anchor).
UNIONS = {
    frozenset(typing.get_args(typing.get_args(arrival_schema.ArrivalProcess)[0])):
        ("workload.arrival", "workloadarrival"),
    frozenset(typing.get_args(typing.get_args(schema.LengthDist)[0])): ("Length distributions", "length-distributions"),
}

def _doc(text: str | None) -> str:
    """A docstring as Markdown: dedented, paragraphs joined, ``code`` as `code`."""
    if not text:
        return ""
    text = re.sub(r"``([^`]+)``", r"`\1`", inspect.cleandoc(text))
    return "\n\n".join(" ".join(p.split()) for p in text.split("\n\n"))


def _strip_optional(annotation):
    """(annotation without None, whether None is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) < len(typing.get_args(annotation)):
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True
    return annotation, False


def _unwrap(annotation, metadata: list):
    """The bare type of an annotation, and every constraint found on the way (Annotated layers)."""
    metadata = list(metadata)
    while typing.get_origin(annotation) is typing.Annotated:
        annotation, *extra = typing.get_args(annotation)
        for item in extra:
            metadata.extend(getattr(item, "metadata", [item]))
    return annotation, metadata


def _bounds(kind, metadata: list, unit: str = "") -> str:
    lo = hi = None  # (value, inclusive)
    for m in metadata:
        if isinstance(m, at.Gt):
            lo = (m.gt, False)
        elif isinstance(m, at.Ge):
            lo = (m.ge, True)
        elif isinstance(m, at.Lt):
            hi = (m.lt, False)
        elif isinstance(m, at.Le):
            hi = (m.le, True)
    if kind is int and lo is not None and not lo[1]:
        lo = (lo[0] + 1, True)  # an integer > 0 is one >= 1
    if lo and hi and lo[1] and hi[1]:
        return f"{_num(lo[0], unit)} to {_num(hi[0], unit)}"
    parts = []
    if lo:
        parts.append(f"{_num(lo[0], unit)} {'≤' if lo[1] else '<'} x")
    if hi:
        parts.append(f"{'x ' if not lo else ''}{'≤' if hi[1] else '<'} {_num(hi[0], unit)}")
    return " ".join(parts).replace("x x", "x")


def _is_model(t) -> bool:
    return inspect.isclass(t) and issubclass(t, BaseModel)


def _union_models(t) -> frozenset | None:
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        args = typing.get_args(t)
        if all(_is_model(a) for a in args):
            return frozenset(args)
    return None


@dataclass
class Row:
    key: str
    type: str
    default: str
    description: str


@dataclass
class Section:
    title: str
    intro: str
    rows: list[Row]
    level: int = 2


def _value(v) -> str:
    if isinstance(v, enum.Enum):
        v = v.value
    if v is None:
        return "unset"
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, str):
        return f"`{v}`" if v else '`""`'
    if isinstance(v, (int, float)):
        return f"`{v!r}`"
    if isinstance(v, dict):
        return "`{}`" if not v else f"`{v}`"
    if isinstance(v, BaseModel):
        return "(below)"
    return f"`{v!r}`"


class Walker:
    """Collects one Section per model, in the order a reader meets them."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.seen: dict[type, str] = {}  # model -> the key path it was documented under
        self.unions_done: set[frozenset] = set()
        self.pending: list[tuple] = []

    def model(self, model: type[BaseModel], path: str, title: str, level: int = 2) -> None:
        self.seen[model] = path
        rows, nested = [], []
        for name, field in model.model_fields.items():
            if field.exclude:
                continue  # set by the loader, never by a file
            key = f"{path}.{name}" if path else name
            rows.append(self.row(key, field, nested))
        self.sections.append(Section(title, _doc(model.__doc__), rows, level))
        for item in nested:
            self.dispatch(*item, level=3 if level == 2 else level)

    def dispatch(self, kind, target, key, level) -> None:
        if kind == "model":
            self.model(target, key, f"`{key}`", level)
        else:
            self.union(target, level)

    def row(self, key: str, field, nested: list) -> Row:
        annotation, optional = _strip_optional(field.annotation)
        bare, metadata = _unwrap(annotation, field.metadata)
        bare, optional2 = _strip_optional(bare)
        bare, metadata = _unwrap(bare, metadata)
        optional = optional or optional2
        if field.default is PydanticUndefined and field.default_factory is None:
            default = "required"
        elif field.default_factory is not None:
            default = _value(field.default_factory())
        else:
            default = _value(field.default)
        union = _union_models(bare)
        one_or_list = _one_or_list(bare)
        if one_or_list is not None:  # kv.offload: one mapping or a list of them
            bare = one_or_list
        if _is_model(bare):
            if bare in self.seen:
                first = self.seen[bare]
                type_text = f"mapping: as [`{first}`](#{_anchor(first)})"
            else:
                type_text = f"mapping: [`{key}`](#{_anchor(key)})"
                nested.append(("model", bare, key))
                self.seen[bare] = key
            if default == "(below)":
                default = "its keys' defaults"
            if one_or_list is not None:
                type_text = type_text.replace("mapping: ", "mapping, or a list of them: ", 1)
        elif union is not None:
            title, anchor = UNIONS[union]
            tags = sorted((_tag(m) for m in union), key=lambda t: _order(union, t))
            type_text = f"[{_name(title)}](#{anchor}): " + ", ".join(f"`{t}`" for t in tags)
            if union not in self.unions_done:
                self.unions_done.add(union)
                nested.append(("union", union, key))
        else:
            type_text = _scalar(bare)
            bounds = _bounds(bare, metadata, "bytes" if key.endswith("_bytes") else "")
            if bounds:
                type_text += f", {bounds}"
        if key in PROFILE_DEFAULTS:
            by_value: dict[str, list[str]] = {}
            for name, prof in PROFILES.items():
                by_value.setdefault(PROFILE_DEFAULTS[key](prof), []).append(f"`{name}`")
            default = "the profile's: " + "; ".join(f"`{v}` for {', '.join(n)}" for v, n in by_value.items())
        if key == "engine.pipeline_mode":
            by_mode: dict[str, list[str]] = {}
            for name, mode in PIPELINE_MODES.items():
                by_mode.setdefault(mode.value, []).append(f"`{name}`")
            default = "the profile's: " + "; ".join(f"`{v}` for {', '.join(n)}" for v, n in by_mode.items())
        if optional and default not in ("required",) and "unset" not in default and "profile" not in default:
            type_text += " or unset"
        name = key.rsplit(".", 1)[-1]  # the section's heading holds the path before it
        return Row(name, type_text, default, " ".join((field.description or "").split()))

    def union(self, union: frozenset, level: int) -> None:
        title, _anchor_ = UNIONS[union]
        variants = sorted(union, key=lambda m: _order(union, _tag(m)))
        intro = {
            "workload.arrival": "When sessions arrive: one of the mappings below, chosen by `type`.",
            "Length distributions": (
                "`workload.prompt_tokens`, `workload.output_tokens` and `workload.conversation.turns` each take "
                "one of these, chosen by `type`; every one also takes `min` (default 1) and `max` to clip its "
                "draws. Their bounds are the `<length>` rows of the limits."),
        }[title]
        heading = f"`{title}`" if "." in title else title
        self.sections.append(Section(heading, intro, [], level))
        for model in variants:
            rows = []
            own = [n for n in vars(model).get("__annotations__", {}) if n in model.model_fields]
            for name in own + [n for n in model.model_fields if n not in own]:
                if name == "type":
                    continue
                rows.append(self.row(name, model.model_fields[name], []))
            self.sections.append(Section(f"`type: {_tag(model)}`", _doc(model.__doc__), rows, level + 1))


def _one_or_list(t):
    """The model of a "one mapping or a list of them" union (sim/config/offload_schema.py's
    OffloadTiers), else None."""
    if typing.get_origin(t) is not typing.Union:
        return None
    args = [typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a for a in typing.get_args(t)]
    if len(args) == 2 and _is_model(args[0]) and typing.get_origin(args[1]) is list \
            and typing.get_args(args[1]) == (args[0],):
        return args[0]
    return None


def _tag(model) -> str:
    return typing.get_args(model.model_fields["type"].annotation)[0]


def _order(union, tag) -> int:
    """The variants in the order the schema's Union lists them."""
    for u in (arrival_schema.ArrivalProcess, schema.LengthDist):
        members = typing.get_args(typing.get_args(u)[0])
        if frozenset(members) == union:
            return [_tag(m) for m in members].index(tag)
    return 0


def _name(title: str) -> str:
    return "arrival" if title == "workload.arrival" else "length distribution"


def _anchor(key: str) -> str:
    """MkDocs' slug of a heading `key` (toc's default: punctuation dropped, spaces as '-')."""
    return re.sub(r"[^\w\- ]", "", key).strip().lower().replace(" ", "-")


def _scalar(t) -> str:
    if t is bool:
        return "bool"
    if t is int:
        return "integer"
    if t is float:
        return "number"
    if t is str:
        return "string"
    if typing.get_origin(t) is typing.Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(t))
    if inspect.isclass(t) and issubclass(t, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in t)
    if typing.get_origin(t) is dict:
        return "mapping"
    raise TypeError(f"no rendering for the type {t!r}: teach docs/gen_scenario_reference.py")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    walker = Walker()
    walker.model(schema.Scenario, "", "Top level")
    out = [HEADER]
    for sec in walker.sections:
        out.append(f"{'#' * sec.level} {sec.title}\n")
        if sec.intro:
            out.append(sec.intro + "\n")
        if sec.rows:
            out.append("| key | type | default | meaning |\n|---|---|---|---|")
            out.extend(f"| `{r.key}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.description)} |"
                       for r in sec.rows)
            out.append("")
    out.append("## Defaults set by the engine profile\n")
    out.append("Where a file leaves these keys out, the engine profile fills them in (`sim/config/"
               "profile_schema.py`); keys you set yourself always win. Prefix caching is filled in only with "
               "the `paged` allocator and no token eviction, and a model with a sliding window shorter than "
               "`max_model_len` keeps it off.\n")
    out.append(_profile_table() + "\n")
    out.append(_batch_defaults_section())
    out.append("## Other limits\n")
    out.append("Beyond each key's bounds above, loading refuses:\n")
    out.append(_limits() + "\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date; write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python docs/gen_scenario_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

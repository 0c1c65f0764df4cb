"""A sweep's grid: ``--grid key.path=v1,v2,...`` options in, validated points out.

Each ``--grid`` names one scenario key and its values (each parsed as YAML, as ``--set``
does; commas inside ``[...]``, ``{...}`` or quotes do not split). The points are the
cartesian product, in the order the options were given (the last key varies fastest).

Validation contract (the rule ``sim sweep`` documents):

* a malformed option (no ``=``, an empty value, a key given twice) is a ConfigError;
* every point's scenario is validated (``parse_scenario`` + the memory plan) before
  anything runs. A key or a value for which *every* point fails (a typo, block_size 0, a
  model that never fits) is a ConfigError naming that key: nothing runs, exit 2;
* a point that fails only in combination with other values (prefix caching with a
  contiguous allocator, a long max_model_len on a small card) is kept, marked invalid with
  its error, and recorded in ``results.csv``; the other points run.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass


from sim.errors import ConfigError, parse_yaml
from sim.config.scenario import parse_scenario, read_yaml, set_override
from sim.sweep.inputs import FileDigests


@dataclass(frozen=True)
class GridAxis:
    key: str
    raw_values: tuple[str, ...]  # as typed, for labels and --set
    values: tuple  # parsed as YAML


@dataclass(frozen=True)
class SweepPoint:
    """One point of the grid: its overrides and, when invalid, why."""

    index: int
    point_id: str  # a hash of the point's whole scenario: the resume key
    values: dict  # grid key -> value
    data: dict  # the raw scenario mapping with every override applied
    error: str | None = None


@dataclass(frozen=True)
class SweepPlan:
    scenario_path: str
    axes: tuple[GridAxis, ...]
    points: tuple[SweepPoint, ...]

    @property
    def keys(self) -> list[str]:
        return [a.key for a in self.axes]


def split_values(text: str) -> list[str]:
    """Split on top-level commas (not inside brackets, braces or quotes)."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def parse_axis(option: str, source: str = "--grid") -> GridAxis:
    if "=" not in option:
        raise ConfigError(source, option, "expected key.path=v1,v2,... (e.g. kv.block_size=8,16,32)")
    key, _, raw = option.partition("=")
    key = key.strip()
    if not key or not all(key.split(".")):
        raise ConfigError(source, option, "empty key in key path")
    raw_values = split_values(raw)
    if any(v == "" for v in raw_values):
        raise ConfigError(source, key, f"empty value in {raw!r}; give comma-separated values")
    values = tuple(parse_yaml(v, source, key=key) for v in raw_values)  # no alias bombs
    if len(set(map(json.dumps, values))) != len(values):
        raise ConfigError(source, key, f"a value is repeated in {raw!r}")
    return GridAxis(key, tuple(raw_values), values)


def parse_axes(options: list[str]) -> tuple[GridAxis, ...]:
    if not options:
        raise ConfigError("--grid", "<none>", "give at least one --grid key.path=v1,v2,...")
    axes = tuple(parse_axis(o) for o in options)
    seen = set()
    for a in axes:
        if a.key in seen:
            raise ConfigError("--grid", a.key, "this key is given twice; put all its values in one --grid")
        seen.add(a.key)
    return axes


def point_id(data: dict, file_digests: dict[str, str] | None = None) -> str:
    """A hash of the point's whole scenario and of the content of every file it reads
    (``file_digests``, see :mod:`sim.sweep.inputs`): a changed trace, calibration or
    model config.json makes a new point, which ``--resume`` runs again."""
    doc = {"scenario": data, "files": file_digests} if file_digests else data
    blob = json.dumps(doc, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _check_point(data: dict, source: str) -> str | None:
    from sim.engine.parts import build_plan

    try:
        build_plan(parse_scenario(data, source))
    except ConfigError as exc:
        return str(exc)
    return None


def plan_sweep(scenario_path: str, grid: list[str], sets: list[str] = ()) -> SweepPlan:
    """Read the scenario, apply ``--set``, expand the grid and validate every point."""
    axes = parse_axes(grid)
    base = read_yaml(scenario_path) or {}
    if not isinstance(base, dict):
        raise ConfigError(scenario_path, "<top>", "a scenario must be a YAML mapping of keys to values")
    for assignment in sets:
        set_override(base, assignment, source=scenario_path)
    points = []
    digests = FileDigests()
    for index, combo in enumerate(itertools.product(*(range(len(a.values)) for a in axes))):
        data = copy.deepcopy(base)
        for axis, i in zip(axes, combo):
            set_override(data, f"{axis.key}={axis.raw_values[i]}", source=scenario_path)
        values = {a.key: a.values[i] for a, i in zip(axes, combo)}
        pid = point_id(data, digests.of(data, scenario_path))
        points.append(SweepPoint(index, pid, values, data, _check_point(data, scenario_path)))
    _reject_hopeless(scenario_path, axes, points)
    return SweepPlan(scenario_path, axes, tuple(points))


def _reject_hopeless(source: str, axes, points) -> None:
    """A key or value that fails in every point is a bad grid option, not a combination."""
    if all(p.error for p in points):
        raise ConfigError("--grid", "<all points>", f"no point is valid; the first: {points[0].error}")
    for axis in axes:
        for raw, value in zip(axis.raw_values, axis.values):
            same = json.dumps(value)
            mine = [p for p in points if json.dumps(p.values[axis.key]) == same]
            if all(p.error for p in mine):
                raise ConfigError(source, axis.key, f"grid value {raw!r} fails in every point: "
                                  f"{mine[0].error}")

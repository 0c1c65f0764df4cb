"""A scenario: YAML in, frozen and validated configuration out (the schema: ``schema.py``).

All validation of user input happens here, once, at load. Every later module may assume
the configuration is well-formed and never mutates it. Bad input raises
:class:`sim.errors.ConfigError` naming the file, the key path and what is allowed.

Schema (see README.md, "Scenario reference", for the full table)::

    name, description, seed, model, gpu
    engine:    max_model_len, gpu_memory_utilization, weight_dtype, kv_dtype, ...
    kv:        allocator, block_size, prefix_caching, prefix_cache_eviction,
               token_eviction {policy, window_tokens, sink_tokens, heavy_tokens}, swap_space_gb
    scheduler: policy, max_num_seqs, max_num_batched_tokens, preemption,
               preemption_victim, watermark, when_kv_full
    workload:  num_requests | duration_s, arrival | trace, prompt_tokens, output_tokens,
               max_tokens, shared_prefix, conversation
    slo:       ttft_s, tpot_s
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sim.errors import ConfigError
from sim.config.schema import *  # noqa: F403  (the schema's names are this module's API too)
from sim.config.schema import BatchingPolicy, EmpiricalLength, FixedLength, Scenario

def _cross_checks(sc: Scenario) -> list[tuple[str, str]]:
    """Checks that need more than one section; returns (key.path, message) pairs."""
    problems = []
    mml = sc.engine.max_model_len
    if (
        sc.scheduler.policy != BatchingPolicy.CHUNKED_PREFILL
        and sc.max_num_batched_tokens < mml
    ):
        problems.append((
            "scheduler.max_num_batched_tokens",
            f"{sc.max_num_batched_tokens} is below engine.max_model_len {mml}: without chunked "
            "prefill a long prompt could never be scheduled; raise it or use policy 'chunked-prefill'",
        ))
    wl = sc.workload
    if wl.prompt_tokens is not None and wl.prompt_tokens.min > mml - 1:
        problems.append((
            "workload.prompt_tokens",
            f"every prompt is at least {wl.prompt_tokens.min} tokens, but engine.max_model_len "
            f"is {mml}: allowed prompts are shorter than max_model_len",
        ))
    if isinstance(wl.prompt_tokens, FixedLength) and wl.prompt_tokens.value >= mml:
        problems.append((
            "workload.prompt_tokens.value",
            f"a prompt of {wl.prompt_tokens.value} tokens does not fit engine.max_model_len {mml}",
        ))
    if wl.shared_prefix is not None and wl.shared_prefix.prefix_tokens >= mml:
        problems.append((
            "workload.shared_prefix.prefix_tokens",
            f"{wl.shared_prefix.prefix_tokens} must be below engine.max_model_len {mml}",
        ))
    for key, dist in (("prompt_tokens", wl.prompt_tokens), ("output_tokens", wl.output_tokens)):
        if isinstance(dist, EmpiricalLength) and not sc.resolve(dist.path).is_file():
            problems.append((f"workload.{key}.path", f"file not found: {dist.path}"))
    if wl.trace is not None and not sc.resolve(wl.trace.path).is_file():
        problems.append(("workload.trace.path", f"file not found: {wl.trace.path}"))
    return problems


def _key_path(loc: tuple, data: Any) -> str:
    """Turn a pydantic error location into a user's key path, dropping union tags."""
    parts, node = [], data
    for item in loc:
        if isinstance(node, dict) and item in node:
            parts.append(str(item))
            node = node[item]
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            parts.append(str(item))
            node = node[item]
        elif isinstance(item, str) and (not isinstance(node, dict) or "type" not in node or item != node.get("type")):
            parts.append(str(item))  # a missing or unknown key: still name it
            node = None
    return ".".join(parts) or "<top>"


def _allowed_keys(loc: tuple) -> list[str]:
    """Known keys at the parent of ``loc`` (for 'unknown key' messages)."""
    candidates: list[Any] = [Scenario]
    for item in loc[:-1]:
        tagged = [m for m in candidates if _tag(m) == item]
        if tagged:  # a discriminated-union tag in the location picks the variant
            candidates = tagged
            continue
        nxt = []
        for model in candidates:
            field = model.model_fields.get(item)
            if field is not None:
                nxt.extend(_models_in(field.annotation))
        if not nxt:
            return []
        candidates = nxt
    if len(candidates) != 1:
        return []
    return sorted(k for k in candidates[0].model_fields if k != "source_path")


def _tag(model: Any) -> Any:
    field = model.model_fields.get("type")
    args = getattr(field.annotation, "__args__", ()) if field is not None else ()
    return args[0] if len(args) == 1 else None


def _models_in(ann: Any) -> list:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [ann]
    found = []
    for arg in getattr(ann, "__args__", ()) or ():
        found.extend(_models_in(arg))
    return found


def _explain(err: dict, data: Any) -> tuple[str, str]:
    loc = tuple(err["loc"])
    key = _key_path(loc, data)
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc)
        return key, "unknown key" + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return key, "required key is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        key = f"{key}.type"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    got = err.get("input")
    if kind not in ("value_error",) and not isinstance(got, (dict, list)):
        msg = f"{msg} (got {got!r})"
    return key, msg


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate an already-parsed YAML document. Raises ConfigError on the first problem."""
    if not isinstance(data, dict):
        raise ConfigError(source, "<top>", "a scenario must be a YAML mapping of keys to values")
    try:
        sc = Scenario.model_validate({**data, "source_path": source})
    except ValidationError as exc:
        key, msg = _explain(exc.errors()[0], data)
        raise ConfigError(source, key, msg) from None
    problems = _cross_checks(sc)
    if problems:
        raise ConfigError(source, *problems[0])
    return sc


def set_override(data: dict, assignment: str, source: str = "--set") -> None:
    """Apply ``key.path=value`` (value parsed as YAML) to a raw scenario mapping in place."""
    if "=" not in assignment:
        raise ConfigError(source, assignment, "expected key.path=value")
    path, _, raw = assignment.partition("=")
    keys = path.strip().split(".")
    if not all(keys):
        raise ConfigError(source, path, "empty key in key path")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        raise ConfigError(source, path, f"cannot parse value {raw!r} as YAML") from None
    node = data
    for k in keys[:-1]:
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(source, path, f"'{k}' is not a mapping")
        node = nxt
    node[keys[-1]] = value


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file, turning I/O and syntax problems into ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(path), "<file>", "file not found")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "<yaml>"
        raise ConfigError(str(path), where, f"malformed YAML: {getattr(exc, 'problem', exc)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), "<file>", f"cannot read: {exc}") from None


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    """Read, override (``--set``) and validate a scenario file."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "<top>", "a scenario must be a YAML mapping of keys to values")
    for assignment in overrides:
        set_override(data, assignment, source=str(path))
    return parse_scenario(data, str(path))

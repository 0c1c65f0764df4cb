"""A scenario: YAML in, frozen and validated configuration out (the schema: ``schema.py``).

All validation of user input happens here, once, at load. Every later module may assume
the configuration is well-formed and never mutates it. Bad input raises
:class:`sim.errors.ConfigError` naming the file, the key path and what is allowed.

Schema (docs/reference/scenario.md, generated from it, has every key)::

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

from pydantic import BaseModel, ValidationError

from sim.config.shipped import available_scenarios, shipped_scenario
from sim.errors import ConfigError, did_you_mean, parse_yaml, read_yaml_file
from sim.config.limits import MAX_SESSIONS, ceiling_message
from sim.config.schema import *  # noqa: F403  (the schema's names are this module's API too)
from sim.config.schema import BatchingPolicy, EmpiricalLength, FixedLength, Scenario, UniformLength, ZipfLength

#: Most turns of one conversation: turn k's prompt repeats the k-1 turns before it.
MAX_TURNS = 10_000

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
    problems.extend(_size_checks(sc))
    problems.extend(_offload_checks(sc))
    for key, dist in (("prompt_tokens", wl.prompt_tokens), ("output_tokens", wl.output_tokens)):
        if isinstance(dist, EmpiricalLength) and not sc.resolve(dist.path).is_file():
            problems.append((f"workload.{key}.path", f"file not found (or not a regular file): {dist.path}"))
    if wl.trace is not None and not sc.resolve(wl.trace.path).is_file():
        problems.append(("workload.trace.path", f"file not found (or not a regular file): {wl.trace.path}"))
    return problems


def _offload_checks(sc: Scenario) -> list[tuple[str, str]]:
    """``kv.offload`` runs on one single-stage engine with prefix caching, continuous batching."""
    if sc.kv.offload is None:
        return []
    if not sc.kv.prefix_caching:
        return [("kv.offload", "needs kv.prefix_caching: true (the tier is looked up by the prefix cache's "
                 "block hashes)")]
    if sc.scheduler.policy == BatchingPolicy.STATIC:
        return [("kv.offload", "needs scheduler.policy 'continuous' or 'chunked-prefill' (not 'static')")]
    if sc.engine.pipeline_parallel_size > 1:
        return [("kv.offload", "runs on single-stage engines only so far: set engine.pipeline_parallel_size: 1")]
    if sc.cluster.num_replicas > 1 and sc.cluster.disaggregation is not None:
        return [("kv.offload", "runs on replicas that prefill and decode (not disaggregated pools) so far: "
                 "remove cluster.disaggregation")]
    return []


def _size_checks(sc: Scenario) -> list[tuple[str, str]]:
    """Products of sizes that would exhaust memory or time (docs/reference/scenario.md, "Other limits")."""
    problems, wl = [], sc.workload
    if wl.trace is None and wl.num_requests is None and wl.duration_s is not None:
        expected = wl.duration_s * wl.arrival.rate
        if expected > MAX_SESSIONS:
            problems.append(("workload.duration_s", (
                f"{wl.duration_s:g} s at workload.arrival.rate {wl.arrival.rate:g}/s is about "
                f"{expected:.3g} arrivals; the most is {MAX_SESSIONS}: shorten it, lower the rate "
                "or set workload.num_requests")))
    turns = wl.conversation.turns if wl.conversation is not None else None
    if turns is not None:
        low = {FixedLength: "value", UniformLength: "low"}.get(type(turns))
        high = {FixedLength: "value", UniformLength: "high", ZipfLength: "max"}.get(type(turns))
        least = max(turns.min, getattr(turns, low) if low else 1)
        most = getattr(turns, high) if high else turns.max
        if least > MAX_TURNS or (most is not None and min(most, turns.max or most) > MAX_TURNS):
            problems.append(("workload.conversation.turns", (
                f"sessions of up to {most or least} turns; the most is {MAX_TURNS} "
                "(each turn's prompt repeats the turns before it)")))
    return problems


def _key_path(loc: tuple, data: Any) -> str:
    """Turn a pydantic error location into a user's key path, dropping union tags."""
    parts, node = [], data
    for item in loc:
        if isinstance(item, str) and item.startswith("<"):
            continue  # a tag of a union told apart by the value's shape (kv.offload)
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
        if isinstance(item, str) and item.startswith("<") or isinstance(item, int):
            continue  # a shape tag or a list index (kv.offload.<list>.1)
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
        candidates = list(dict.fromkeys(nxt))
    if len(candidates) != 1:
        return []
    return sorted(k for k in candidates[0].model_fields if k not in ("source_path", "profile_defaults"))


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
        hint = did_you_mean(str(loc[-1]), allowed) if allowed else ""
        return key, "unknown key" + hint + (f"; allowed keys: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return key, "required key is missing"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        key = f"{key}.type"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    got = err.get("input")
    bound = (err.get("ctx") or {}).get("le", (err.get("ctx") or {}).get("ge"))
    ceiling = ceiling_message(key, got, kind, bound)
    if ceiling is not None:
        return key, ceiling
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
        key = assignment.strip()
        if not key or ": " in key or "\n" in key:  # not a key the one error line can show as one
            raise ConfigError(source, "--set", f"expected key.path=value (e.g. kv.block_size=32), got {assignment!r}")
        raise ConfigError(source, key, "expected key.path=value (e.g. kv.block_size=32)")
    path, _, raw = assignment.partition("=")
    path = path.strip()
    keys = path.split(".")
    if not all(k.strip() for k in keys):
        raise ConfigError(source, path or "<empty>", "empty key in key path; expected key.path=value")
    value = parse_yaml(raw, source, key=path)  # bounded: no alias bombs from the command line
    node = data
    for k in keys[:-1]:
        if isinstance(node, list):  # a list item by its index (kv.offload.1.capacity_gb)
            node = node[_index(node, k, source, path)]
            if not isinstance(node, dict):
                raise ConfigError(source, path, f"item {k} is not a mapping")
            continue
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, (dict, list)):
            raise ConfigError(source, path, f"'{k}' is not a mapping")
        node = nxt
    if isinstance(node, list):
        node[_index(node, keys[-1], source, path)] = value
    else:
        node[keys[-1]] = value


def _index(items: list, key: str, source: str, path: str) -> int:
    """``key`` as an index into ``items`` (one line naming the allowed ones otherwise)."""
    if not key.isdigit() or int(key) >= len(items):
        raise ConfigError(source, path, f"'{key}' is not an item of the list: allowed 0 to {len(items) - 1}")
    return int(key)


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file safely (sim.errors.read_yaml_file: a regular file of bounded size,
    UTF-8, bounded nesting and alias expansion); every problem is one ConfigError."""
    return read_yaml_file(path)


def load_scenario(path: str | Path, overrides: list[str] = ()) -> Scenario:
    """Read, override (``--set``) and validate a scenario file (or a shipped scenario by name:
    sim/config/shipped.py)."""
    shipped = shipped_scenario(path)
    if shipped is not None:
        path = shipped
    elif not Path(path).exists() and not Path(path).is_symlink():
        names = available_scenarios()
        hint = f" (did you mean a shipped scenario? {', '.join(names)}: e.g. sim run {names[0]})" if names else ""
        raise ConfigError(str(path), "<file>", f"file not found{hint}")
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), "<top>", "a scenario must be a YAML mapping of keys to values")
    for assignment in overrides:
        set_override(data, assignment, source=str(path))
    return parse_scenario(data, str(path))

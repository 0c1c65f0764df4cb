"""The engine profile a run models: the profile's defaults (sim/cost/profile.py), then the numbers
a calibration measured for it (the machine's CPU), then the scenario's entrypoint and overrides."""

from __future__ import annotations

from sim.cost.profile import OVERRIDABLE, PROFILES, EngineProfile, Entrypoint, GraphMode, OutputProcessing


def engine_profile(engine, calibration) -> EngineProfile:
    """The profile of a scenario's ``engine`` section (its ``profile``, ``entrypoint`` and
    ``profile_overrides``) on ``calibration``: the profile, this machine's numbers, no front end
    when ``entrypoint`` is offline, then the scenario's overrides (which win), and the chat
    route's time per request only with ``entrypoint: chat``."""
    profile = with_calibration(PROFILES[engine.profile], calibration)
    if engine.entrypoint is Entrypoint.OFFLINE:
        profile = profile.offline()
    profile = profile.with_overrides(engine.profile_overrides.as_dict())
    # the chat route's time only where clients call it, whatever the overrides say
    return profile if engine.entrypoint is Entrypoint.CHAT else profile.completions()


_BOOL_KEYS = ("async_scheduling", "prefill_first", "gqa_shared_kv_reads", "reserve_full_length")
_ENUM_KEYS = {"graph_mode": GraphMode, "output_processing": OutputProcessing}


def with_calibration(profile: EngineProfile, calibration) -> EngineProfile:
    """``profile`` with the host numbers a calibration measured for it (its ``profiles:``
    section, e.g. ``profiles: {vllm-v1: {step_host_s: 4.0e-4}}``): the machine's CPU sets
    them, not the scenario. Each key is checked here (one-line ConfigError: file, key, what
    is allowed); profiles the calibration names that do not exist are refused too."""
    from sim.errors import ConfigError  # noqa: PLC0415

    sections = getattr(calibration, "profiles", None) or {}
    file = getattr(calibration, "file", "<calibration>")
    for name in sections:
        if name not in PROFILES:
            raise ConfigError(file, f"profiles.{name}", f"unknown engine profile; allowed: {', '.join(PROFILES)}")
    values = dict(sections.get(str(profile.name), {}))
    for key, value in values.items():
        where = f"profiles.{profile.name}.{key}"
        if key not in OVERRIDABLE:
            raise ConfigError(file, where, f"unknown key; allowed: {', '.join(OVERRIDABLE)}")
        if key in _BOOL_KEYS:
            ok = isinstance(value, bool)
            allowed = "true or false"
        elif key in _ENUM_KEYS:
            ok = value in {str(v) for v in _ENUM_KEYS[key]}
            allowed = ", ".join(str(v) for v in _ENUM_KEYS[key])
        elif key == "max_graph_size":
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1 << 16
            allowed = "an integer from 0 to 65536"
        elif key == "scheduler_steps":
            ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 64
            allowed = "an integer from 1 to 64"
        elif key == "custom_allreduce_max_bytes":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1e12
            allowed = "bytes from 0 to 1e12"
        else:
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
                  and 0.0 <= value <= 10.0)  # also refuses nan
            allowed = "seconds from 0 to 10"
        if not ok:
            raise ConfigError(file, where, f"got {value!r}; allowed: {allowed}")
    return profile.with_overrides(values)

"""Checked numbers for the calibration readers: one rule for what a number in a YAML file may be.

YAML 1.1 (PyYAML) reads ``1e12`` (an exponent without a dot) as a string, so a string that spells
a float is taken as that float. Booleans, NaN, infinities and anything else that is not a number
are refused with a one-line ConfigError naming the file and the key. Pure.
"""

from __future__ import annotations

import math
import re
from typing import Any

from sim.errors import ConfigError

FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def yaml_float(value: Any) -> Any:
    """``value`` as a float where it is a string that spells one; anything else unchanged."""
    if isinstance(value, str) and FLOAT_RE.match(value.strip()):
        return float(value)
    return value


def finite_number(value: Any, file: str, key: str, what: str = "") -> float:
    """``value`` as a finite float (``what`` names it in the error: "bytes", "seconds")."""
    value = yaml_float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        name = f" ({what})" if what else ""
        raise ConfigError(file, key, f"expected a number{name}, got {value!r}; allowed: finite numbers"[:300])
    return float(value)


def number_in(value: Any, file: str, key: str, lo: float, hi: float, what: str = "") -> float:
    """A finite number from ``lo`` to ``hi``, both included."""
    value = finite_number(value, file, key, what)
    if not lo <= value <= hi:
        name = f"{what} " if what else ""
        raise ConfigError(file, key, f"{name}{value:g} is outside the allowed range {lo:g} to {hi:g}")
    return value


def fraction_number(value: Any, file: str, key: str) -> float:
    """A finite number in (0, 1]: an efficiency or a share."""
    value = finite_number(value, file, key)
    if not 0 < value <= 1:
        raise ConfigError(file, key, f"must be in (0, 1], got {value:g}")
    return value

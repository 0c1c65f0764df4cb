"""GPU prices per hour: the shipped table (prices.yaml, with its date and sources) and a
plan's ``prices:`` overrides on top of it."""

from __future__ import annotations

import math
from pathlib import Path

from sim.errors import ConfigError, read_yaml_file

PRICES_FILE = Path(__file__).with_name("prices.yaml")


def shipped_prices() -> dict:
    """The shipped table: gpu -> {"usd_per_gpu_hour", "source"}, plus its date."""
    doc = read_yaml_file(PRICES_FILE)
    date = doc["date"]
    return {gpu: {**entry, "date": date} for gpu, entry in doc["gpus"].items()}


def load_prices(path: str, overrides) -> dict:
    prices = shipped_prices()
    if overrides is None:
        return prices
    if not isinstance(overrides, dict):
        raise ConfigError(path, "prices", "expected a mapping of gpu name -> USD per GPU-hour")
    for gpu, usd in overrides.items():
        ok = isinstance(usd, (int, float)) and not isinstance(usd, bool) and math.isfinite(usd) and usd > 0
        if not ok:
            raise ConfigError(path, f"prices.{gpu}", f"got {usd!r}; expected a positive number (USD per GPU-hour)")
        prices[str(gpu)] = {"usd_per_gpu_hour": float(usd), "source": f"the plan file {path}", "date": None}
    return prices

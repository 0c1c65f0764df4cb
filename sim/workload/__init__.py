"""Workloads: sessions of requests from distributions, multi-turn conversations or traces.

May import: ``sim.config``, ``sim.errors``. Deterministic for a seed; no clock.
"""

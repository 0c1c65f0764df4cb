"""Engines on one SimPy clock: replicas (each a ``Simulation``), the router that picks one at
each arrival, and the cluster summary. Disaggregated pools hand off through
``sim.engine.disagg``.

Imports ``simulation``, ``parts``, ``logs`` and ``disagg``; never ``pipeline``."""

"""Disaggregated prefill/decode: the pools' engine settings (``pools``), the KV hand-off between
them (``handoff``) and its summary (``summary``).

Imports ``step`` and ``parts``; the cluster (``sim.engine.cluster``) drives it."""

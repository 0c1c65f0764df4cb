"""Capacity planning (``sim plan``): for each configuration of a search space, the memory
plan, the highest arrival rate that meets an SLO (bracket and bisect over simulated
probes), the replicas and GPUs a target rate needs, and their cost; plan.json, plan.csv,
plan.html and the ranked terminal table.

May import: ``sim.sweep`` (its process-pool helpers), ``sim.outputs``, ``sim.engine``,
``sim.config`` and below; never the CLI.
"""

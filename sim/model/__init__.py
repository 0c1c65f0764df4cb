"""Model specs and the memory plan: what a model is (layers, heads, dtypes, parameter counts),
how many bytes its weights and KV cache take, and how a GPU's memory splits between them.

May import: ``sim.errors``. Pure arithmetic; no calibration, no cost, no simulation.
"""

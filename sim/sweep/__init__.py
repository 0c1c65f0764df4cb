"""What-if sweeps: the grid of scenario points, running them (local pool or Ray) with resume,
and results.csv.

May import: ``sim.engine``, ``sim.outputs``, ``sim.config``; never the CLI.
"""

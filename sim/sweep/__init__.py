"""What-if sweeps: the grid of scenario points (ids hash the scenario and the files it reads),
running them (local pool or Ray) with resume, results.csv and the end-of-sweep table.

May import: ``sim.engine``, ``sim.outputs``, ``sim.config``; never the CLI.
"""

"""What a run leaves behind: summary.json and the CSVs, the terminal table, report.html,
whatif.html and compare.html, with shared Plotly figures.

May import: ``sim.engine`` (results and metrics), ``sim.calib`` and ``sim.config``; never the CLI.
"""

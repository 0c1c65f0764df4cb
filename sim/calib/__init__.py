"""The calibration file format: a GPU's datasheet numbers or measured kernel fits
(``calibrations/<gpu>.yaml``), the fitted kernel models and the whole-step composition.

May import: ``sim.errors``, ``sim.model``. Reading and checking files only; no timing.
"""

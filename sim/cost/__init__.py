"""The cost model: one batch shape in, seconds out. A datasheet roofline and a fitted-kernel
model behind one interface, chosen once per run from the calibration.

May import: ``sim.model``, ``sim.calib``, ``sim.errors``. Pure: no SimPy, no I/O, no randomness.
"""

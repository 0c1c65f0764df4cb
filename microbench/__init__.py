"""``microbench``: times kvsim's kernels and the real engine's whole steps on this machine and
fits them into a calibration YAML (``calibrate``, ``fit``, ``predict``).

May import: ``realengine``, ``kernels``, ``sim`` (below the CLI); never ``validation``. Needs torch.
"""

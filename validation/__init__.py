"""``sim validate``: how far is the simulator from a real engine running the same policies?

Lockstep and open-loop runs of the real engine (``runner.py``), the errors (``compare.py``), the
calibration drift check (``drift.py``) and validation.html (``report.py``). Needs torch.
May import: ``sim``, ``realengine``, ``microbench``, ``kernels``; nothing imports it but the CLI.
"""

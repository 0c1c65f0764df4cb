"""``sim validate``: how far is the simulator from a real engine running the same policies?

Lockstep and open-loop runs of the real engine (``runner.py``), the errors (``compare.py``), the
calibration drift check (``drift.py``) and validation.html (``report.py``); ``sim run
--validate-every N``'s sampling of every Nth step on the real engine (``inrun.py``) and its
summary section (``inrun_stats.py``). Needs torch.
May import: ``sim``, ``realengine``, ``microbench``, ``kernels``; nothing imports it but the CLI.
"""

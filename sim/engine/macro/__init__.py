"""Macro-steps: stretches of decode steps advanced at once, exactly (``run.DecodeRun``), the
decode batch's crossing schedules (``batch``, ``cross``) and the clock's catch-up (``clock``).

Imports ``sim.engine.logs`` and the layers below the engine."""

"""Scenario files: the schema (frozen pydantic models) and loading with ``--set`` overrides,
every error reported as one line naming the file and the key.

May import: ``sim.errors``, and the enums of ``sim.kv`` and ``sim.sched`` that scenarios name.
"""

"""schedule.jsonl: every scheduling decision, one JSON line a step.

``sim run --schedule`` writes it; tests/conformance/ compares kvsim with vLLM's own scheduler
in the same records, and a user can diff a run against a real engine's log (docs/CONFORMANCE.md).
A line holds one call of the scheduler (a step), in order:

* ``step``: its index (0-based; a step that schedules nothing still counts);
* ``t_s``: when it started on the simulated clock (omitted where no clock runs);
* ``scheduled``: ``[[request_id, tokens], ...]`` in the order the scheduler served them;
* ``preempted``: request ids preempted in it, in order; ``finished``: those that finished;
* ``hits``: ``{request_id: prefix-cache hit tokens}`` of the requests admitted in it (new, or
  back after a recompute preemption: its own blocks may still be cached);
* ``free_blocks``: free KV blocks after the step (a paged allocator; cached free blocks
  count as free, as vLLM counts them), else ``free_slots``: free KV token slots;
* ``running`` and ``waiting``: the queue lengths after the step.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator

from sim.request import Request
from sim.sched.output import SchedulerOutput


def step_record(index: int, out: SchedulerOutput, finished: Iterable[Request], scheduler,
                allocator, start_s: float | None = None) -> dict:
    """The record of one step: ``out`` scheduled, then ``finished`` finished."""
    rec: dict = {"step": index}
    if start_s is not None:
        rec["t_s"] = round(start_s, 9)
    rec["scheduled"] = [[r.request_id, n] for r, n in out.scheduled]
    rec["preempted"] = [r.request_id for r in out.preempted]
    rec["finished"] = [r.request_id for r in finished]
    rec["hits"] = {str(r.request_id): hit for r, hit in out.admitted}
    if getattr(allocator, "block_based", False) and hasattr(allocator, "pool"):
        rec["free_blocks"] = allocator.pool.num_free
    else:
        rec["free_slots"] = allocator.num_total_slots - allocator.num_allocated_slots()
    rec["running"] = len(scheduler.running)
    rec["waiting"] = len(scheduler.waiting) + len(scheduler.swapped)
    return rec


class ScheduleLog:
    """Collects :func:`step_record` lines as the engine steps (``EngineStep.schedule_log``).

    Kept in memory (``records``), or, given a ``path``, streamed to ``path + ".part"`` as the
    run goes (a long run's log never sits in memory) and renamed to ``path`` by :meth:`close`;
    :meth:`discard` removes the part file of a run that failed."""

    def __init__(self, path: Path | None = None) -> None:
        self.records: list[dict] = []
        self.num_steps = 0
        self.path = path
        self._part = None if path is None else path.with_name(path.name + ".part")
        self._file = None if path is None else open(self._part, "w", encoding="utf-8")

    def record(self, out: SchedulerOutput, finished: Iterable[Request], scheduler, allocator,
               start_s: float | None = None) -> dict:
        rec = step_record(self.num_steps, out, finished, scheduler, allocator, start_s)
        self.num_steps += 1
        if self._file is None:
            self.records.append(rec)
        else:
            self._file.write(json.dumps(rec, separators=(",", ":")) + "\n")
        return rec

    def close(self) -> Path | None:
        """Finish the file (renamed into place); its path, or None when kept in memory."""
        if self._file is None:
            return None
        self._file.close()
        self._file = None
        os.replace(self._part, self.path)
        return self.path

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._part.unlink(missing_ok=True)

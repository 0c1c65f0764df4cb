"""Quiet steps of a macro-step stretch (sim/engine/macro/run.py), in one tight loop.

Most steps of a stretch are *quiet*: nobody waits, nothing finishes, no request of async
scheduling's lag is still seated, no event falls within the step, and every crossing only
takes a block (a :class:`~sim.engine.macro.cross.Ring`). Such a step changes only the
batch's running sums, the clock, the step log's row and the ITL log, so :func:`quiet_steps`
advances a run of them with the state in local variables, doing what ``DecodeRun.run``'s
general loop does for them in the same order and with the same float operations (the row,
the front end's work, the tokens' gap), and hands back at the first step that is not quiet:
a step whose last tokens it computes (``fins``), one an event falls within, or a crossing
that might not find its blocks (``stop``: the stretch ends there, as the general loop's).
"""

from __future__ import annotations

from sim.engine.macro.clock import stream

#: Rows a stretch keeps before handing them to the step log (DecodeRun.run's flush).
ROWS_PER_FLUSH = 4096


def quiet_steps(run, b, k: int, t: float, t_next: float, n: int, fast, allocated: int, cached_free: int,
                num_running: int, durations: list, doubles: list, counts: list, k_flushed: int):
    """Advance the quiet steps from step ``k`` (ending at ``t``); returns ``(k, t, allocated,
    cached_free, doubles, counts, k_flushed, stop)``. ``b`` (the batch, a Ring's) and the ITL
    log are updated in place; ``doubles`` and ``counts`` are new lists after a flush."""
    fins, cross, due, pop, short = b.fin, b.cross, b.cross.due, b.pop_free_many, b.short
    tbls, B, plain, pool = b.tbls, b.B, b.plain, b.alloc.pool
    s_comp, s_held, s_minhf, num_free = b.s_comp, b.s_held, b.s_minhf, b.num_free
    frag, fe, itl, steps = run.frag, run.fe, run.itl, run.steps
    gaps, tallies, last = itl.gaps, itl.counts, itl.last
    one_cpu, work = run.one_cpu, run.token_s * n
    stop = False
    while k not in fins:
        kv = s_comp + n  # decode_kv_tokens: sum(computed + 1)
        d = fast(kv)
        t_end = t + d
        if not t_end < t_next:
            break  # an event falls within it: the general loop
        if k == cross.next:  # DecodeBatch.cross_at, a Ring's: one block each, one pop for all
            slots = due(k)
            m = len(slots)
            if m > num_free:
                stop = True  # an allocation might fail and preempt: the normal path decides
                break
            for s, block in zip(slots, pop(m)):
                tbls[s].append(block)
            s_minhf += B * m - (short.pop(k, 0) if short else 0)
            s_held += B * m
            num_free -= m
            allocated += B * m
            if not plain:
                cached_free = pool.num_cached_free * B
        durations.append(d)
        s_comp += n
        doubles += (t_end, t_end - t, 0.0)
        counts += (n, 0, n, 0, 0, num_running, 0, 0, allocated - s_held + s_comp, allocated,
                   s_minhf - s_comp, s_held - s_minhf, frag, cached_free)
        if fe is None:
            at = t_end
        elif one_cpu:  # FrontEnd._run on its one CPU, inlined
            fe.busy_s += work
            at = fe.free_at = (fe.free_at if fe.free_at > t_end else t_end) + work
        else:
            at = stream(fe, t_end, work, (), None)
        gaps.append(at - last)  # ItlLog.tokens of n decodes that had a token in the step before
        tallies.append(n)
        last = at
        t = t_end
        k += 1
        if k - k_flushed >= ROWS_PER_FLUSH:
            itl.last = last
            itl.flush()
            steps.append_rows(doubles, counts)
            doubles, counts, k_flushed = [], [], k
    itl.last = last
    b.s_comp, b.s_held, b.s_minhf, b.num_free = s_comp, s_held, s_minhf, num_free
    return k, t, allocated, cached_free, doubles, counts, k_flushed, stop

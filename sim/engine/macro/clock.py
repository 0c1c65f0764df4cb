"""A macro-step stretch's clock and front end (sim/engine/macro/run.py): moving the SimPy clock
to the end of steps advanced off it, and streaming a step's tokens through the front end."""

from __future__ import annotations

import math
from operator import attrgetter

_TOKEN_S = attrgetter("token_s")


def stream(fe, t_end: float, work: float, produced, finished) -> float:
    """``FrontEnd.stream`` of a step ending at ``t_end`` whose decodes and ``produced``
    (admitted requests whose prompt is done) sampled a token: the latter's first token and
    ``finished``'s whole answer reach the client when the front end has done ``work``, the
    time returned."""
    answered = fe._run(t_end, work)
    for req in produced:
        if req.client_first_s is None:
            req.client_first_s = answered
    if finished is not None:
        for req in finished:
            req.client_last_s = answered
    return answered


def delivered(itl, at: float, k: int, reqs, n: int, produced) -> None:
    """The ITL log's gaps of a stretch's step ``k`` (sim/engine/logs/itl.py), whose ``n`` decodes
    (``reqs[:n]`` at the first step) and ``produced`` got their tokens at ``at``: after the
    first step every decode had its previous token in the step before. (Their ``token_s`` is
    stamped when the stretch ends: DecodeBatch.write_back.)"""
    if k:
        itl.tokens(at, produced, n)
    elif not produced and list(map(_TOKEN_S, reqs[:n])).count(itl.last) == n:  # the usual start: in C
        itl.tokens(at, (), n)
    else:
        itl.tokens(at, reqs[:n] + list(produced))


def advance_to(env, t: float, durations: list[float]):
    """Move the SimPy clock to exactly ``t``, the sum of ``durations`` added one by one to
    ``now``: in one timeout whose delay lands on ``t`` when one exists, else one per step."""
    delay = t - env.now
    for _ in range(4):
        if env.now + delay == t:
            yield env.timeout(delay)
            return
        delay = math.nextafter(delay, math.inf if env.now + delay < t else -math.inf)
    for d in durations:  # no delay rounds to t: the same additions as step by step
        yield env.timeout(d)

"""SGLang 0.4's admission of requests that ignore EOS (``PrefillAdder.add_one_req_ignore_eos``).

SGLang takes this path for a waiting request whose sampling parameters set ``ignore_eos`` while
the radix cache is off: every such request will generate exactly ``max_new_tokens`` tokens, so
the scheduler can tell whether the pool will hold the batch until the end. It lists the
candidate, every running request and those already admitted this step as (tokens still to
generate, tokens held: prompt + output so far), sorted by tokens still to generate, and walks
them in that order (the order they finish), with ``free`` the pool's free tokens less the
candidate's whole prompt and ``freed`` the tokens held by the requests already passed::

    for i, (left, held) in enumerate(states):
        steps = states[i + 1].left if i + 1 < len(states) else left
        if free + freed - steps * (len(states) - i) <= 0: refuse (and stop admitting this step)
        freed += held

A request admitted this way never needs to be retracted: the pool covers every running request's
remaining output in finishing order (the rule's ``steps`` is the next request's total, a margin).
kvsim applies it to the whole workload when the clients ignore EOS (``workload.ignore_eos``,
each request's ``max_tokens`` its output length) and prefix caching is off, and waives it while
nothing runs (SGLang would keep such a request waiting for ever; kvsim's ``add_request`` has
already rejected one that cannot fit the pool alone). Not modelled: the separate stop on the
``new_token_ratio`` estimate (``rem_total_tokens``), which only ends a step's admissions after a
request was admitted.
"""

from __future__ import annotations

from sim.request import Request


def ignore_eos_fits(running: list[Request], req: Request, free_slots: int) -> bool:
    """Whether SGLang 0.4 admits ``req`` with ``running`` in the engine (this step's admissions
    among them, allocated already) and ``free_slots`` free; see the module docstring."""
    states = [(req.max_tokens - req.num_generated, req.num_prompt_tokens + req.num_generated)]
    for r in running:
        left = r.max_tokens - r.num_generated
        if left > 0:  # (a finished request still seated under the overlap lag holds no growth)
            states.append((left, r.num_prompt_tokens + r.num_generated))
    states.sort(key=lambda s: s[0])  # stable: ties keep the candidate first, as SGLang's sort does
    free = free_slots - req.num_prompt_tokens
    freed = 0
    last = len(states) - 1
    for i, (left, held) in enumerate(states):
        steps = states[i + 1][0] if i < last else left
        if free + freed - steps * (len(states) - i) <= 0:
            return False
        freed += held
    return True

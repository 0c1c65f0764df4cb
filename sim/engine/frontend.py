"""The server's front end: the CPU work around the engine that a client waits on.

A request is received and tokenised before the engine sees it (``frontend_request_s`` plus
``frontend_prompt_token_s`` per prompt token); every generated token is detokenised and
streamed (``frontend_token_s`` each) before the client sees it. Real servers do this in a
process of their own (vLLM's API server, SGLang's tokenizer and detokenizer managers), so
it overlaps the engine loop, but it is one CPU: when requests and tokens come faster than
it can handle them they queue, and the client's TTFT and TPOT grow while the engine's do
not. (With ``output_processing: inline`` the token work runs inside the engine loop
instead and is charged to each step: sim/cost/profile.py.)

``FrontEnd`` is that single CPU as a first-come-first-served server. Jobs are submitted in
simulated-time order, so each job's completion is ``max(free_at, now) + its work`` and the
server needs no events of its own: the same completion times a one-slot SimPy resource
would give, without a process per step.
"""

from __future__ import annotations

from sim.cost.profile import EngineProfile, OutputProcessing


class FrontEnd:
    """One CPU serving tokenisation and streaming jobs in arrival order."""

    def __init__(self, profile: EngineProfile) -> None:
        self.request_s = profile.frontend_request_s
        self.prompt_token_s = profile.frontend_prompt_token_s
        streams = profile.output_processing is OutputProcessing.SEPARATE
        self.token_s = profile.frontend_token_s if streams else 0.0
        self.free_at = 0.0  # when the CPU finishes the jobs it has
        self.busy_s = 0.0  # total work done (utilisation = busy_s / span)

    def _run(self, now: float, work_s: float) -> float:
        start = self.free_at if self.free_at > now else now
        self.free_at = start + work_s
        self.busy_s += work_s
        return self.free_at

    def receive(self, now: float, num_prompt_tokens: int) -> float:
        """When a request arriving at ``now`` reaches the engine, tokenised."""
        return self._run(now, self.request_s + self.prompt_token_s * num_prompt_tokens)

    def stream(self, now: float, sampled, finished=()) -> None:
        """Stream the tokens of a step that ended at ``now``: stamp when each request's
        client got its first token and its whole answer. ``sampled``: the requests that
        sampled a token in the step (the scheduler's ``sampled``: a prompt chunk that stops
        short of the prompt's end samples none); ``finished``: the requests that finished in
        it (a static batch returns answers whose last token came earlier)."""
        done = self._run(now, self.token_s * len(sampled)) if sampled else now
        for req in sampled:
            if req.client_first_s is None:
                req.client_first_s = done
        for req in finished:
            req.client_last_s = done
